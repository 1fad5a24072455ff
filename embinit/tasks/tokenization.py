"""Tokenizers by name: word-level (spaCy, whitespace) for word-vector inits, sub-word (GPT-2 BPE, any Hugging
Face tokenizer) for sub-word inits, resolved to a `TokenizerSpec` without loading anything.

The registry `TOKENIZERS` maps each tokenizer name (`spacy`, `whitespace`, `gpt2`) to its resolver, a plain
function `(lang, lowercase, data_dir) -> TokenizerSpec`; any other value is a Hugging Face tokenizer
folder or hub id. `embinit.config` (`WORD_LEVEL`) and `service.paths` read the names from here. Importing
this module is cheap and torch-free.

A tokenizer is resolved in two steps so that a cache hit never pays for loading one: `resolve_tokenizer`
(here) only looks at names and file identities (cheap, gives the cache-key `identity`);
`embinit.tasks.tokenizer_backends.load_backend(spec)` builds the backend when text really has to be
tokenized (its module holds the backends, their contract and the detokenizers, and imports this one).
Here too: what the spec check asks of a local tokenizer folder without loading it
(`local_tokenizer_problem`) and the hints the backends' errors give.

Casing: GloVe 6B is uncased, so word-level tokens are lowercased by default (`lowercase=True`, after
tokenization, as torchtext-era Multi30k pipelines do). Sub-word tokenizers keep their own normalization
(lowercasing GPT-2's cased BPE input would only waste its vocabulary), whatever `lowercase` says.
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from embinit.content_hash import file_digest
from embinit.errors import EmbinitError, unknown_name
from embinit.hf_cache import path_shaped, revision_problem, split_revision

# The registered tokenizers that cut whole words (also their backend kinds): trial keys ask this without
# resolving the name (`TrialConfig._subword_bleu_references`).
WORD_LEVEL = ("spacy", "whitespace")
GPT2_FILES = ("encoder.json", "vocab.bpe")
GPT2_ENV = "EMBINIT_GPT2_DIR"
# A Hugging Face tokenizer folder's own files: a folder with none of them but GPT2_FILES is OpenAI's
# original GPT-2 format (encoder.json is vocab.json, vocab.bpe is merges.txt), read by
# `tokenizer_backends.Gpt2FilesBackend`: AutoTokenizer refused it ("Couldn't instantiate the backend
# tokenizer from one of: ").
HF_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "vocab.txt")
# The text files of a tokenizer folder its libraries read as UTF-8 (`not_utf8_problem`).
_TEXT_FILES = (*HF_TOKENIZER_FILES, *GPT2_FILES, "tokenizer_config.json", "special_tokens_map.json",
               "added_tokens.json")
# Files in a Hugging Face model folder that do not define the tokenizer (weights): not in the identity.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".onnx", ".ckpt")


def _file_id(path: Path) -> list:
    """A tokenizer file in cache keys: its name and content (`content_hash.file_digest`, memoized on disk).
    By (path, size, mtime), a vocab.txt edited at its size with its mtime kept (`cp -p`, `rsync -a` of
    another version) was served the old tokenization; by content, a copied folder is not tokenized again."""
    return [path.name, file_digest(path)]


@dataclass(frozen=True)
class TokenizerSpec:
    """A resolved tokenizer: what it is (`identity`, for cache keys) and what loads it (`kind`:
    `tokenizer_backends.load_backend`)."""

    name: str                  # as the user gave it: a `TOKENIZERS` name, or an HF path/id
    kind: str                  # "spacy" | "whitespace" | "gpt2_files" | "hf"
    lang: str                  # spaCy language ("de", "en"); ignored by the others
    lowercase: bool            # effective: only word-level tokenizers lowercase
    source: str                # spaCy version, a GPT-2 folder, or the HF path/id
    identity: tuple

    @property
    def word_level(self) -> bool:
        return self.kind in WORD_LEVEL


def _spacy(lang: str, lowercase: bool, data_dir: Path | None) -> TokenizerSpec:
    """spaCy's rule-based word tokenizer for `lang` (a blank pipeline: no trained model needed)."""
    version = importlib.metadata.version("spacy")
    return TokenizerSpec("spacy", "spacy", lang, lowercase, f"spacy-{version}", ("spacy", version, lang, lowercase))


def _whitespace(lang: str, lowercase: bool, data_dir: Path | None) -> TokenizerSpec:
    """`str.split`: words as the text's spaces cut them."""
    return TokenizerSpec("whitespace", "whitespace", lang, lowercase, "str.split", ("whitespace", lowercase))


def _gpt2(lang: str, lowercase: bool, data_dir: Path | None) -> TokenizerSpec:
    """GPT-2's byte-level BPE: its encoder.json + vocab.bpe (`find_gpt2_dir`), else the hub's `gpt2`."""
    folder = find_gpt2_dir(data_dir)
    if folder is not None:
        ids = [_file_id(folder / f) for f in GPT2_FILES]
        return TokenizerSpec("gpt2", "gpt2_files", lang, False, str(folder), ("gpt2_files", ids))
    return TokenizerSpec("gpt2", "hf", lang, False, "gpt2", ("hf", "gpt2"))


# name -> resolver(lang, lowercase, data_dir): cheap, loads nothing (`tokenizer_backends.load_backend` does).
TOKENIZERS: dict[str, Callable[[str, bool, Path | None], TokenizerSpec]] = {
    "spacy": _spacy,
    "whitespace": _whitespace,
    "gpt2": _gpt2,
}


def resolve_tokenizer(name: str, lang: str = "en", lowercase: bool = True,
                      data_dir: Path | None = None) -> TokenizerSpec:
    """Name -> TokenizerSpec, without loading anything heavy: a registered name (`TOKENIZERS`), else a
    Hugging Face tokenizer folder or hub id. A missing folder fails here."""
    if not isinstance(name, str) or not name.strip():
        raise EmbinitError(f"tokenizer must be a non-empty string, got {name!r}")
    if name in TOKENIZERS:
        return TOKENIZERS[name](lang, lowercase, data_dir)
    path = Path(name).expanduser()
    if path.is_dir() and _openai_gpt2(path):
        ids = [_file_id(path / f) for f in GPT2_FILES]
        return TokenizerSpec(name, "gpt2_files", lang, False, str(path.resolve()), ("gpt2_files", ids))
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.endswith(_WEIGHT_SUFFIXES))
        return TokenizerSpec(name, "hf", lang, False, str(path.resolve()),
                             ("hf", [_file_id(p) for p in files]))
    # A hub id is "name" or "org/name", pinned as "<id>@<revision>" or not; anything else that looks like a
    # path is a missing folder.
    if path.is_file():   # tokenizer.json or vocab.txt itself: the folder holding it is what loads
        raise EmbinitError(f"tokenizer {name!r} is a file; give the folder that holds a tokenizer's files "
                           f"({path.parent}, if this is one of them), a registered tokenizer {list(TOKENIZERS)} or "
                           f"a hub id")
    if path_shaped(name) or Path(split_revision(name)[0]).suffix in (".json", ".txt"):
        raise EmbinitError(f"tokenizer folder {name!r} does not exist; give a registered tokenizer "
                           f"{list(TOKENIZERS)}, a Hugging Face tokenizer folder or a hub id")
    if (problem := revision_problem(name)) is not None:
        raise EmbinitError(f"tokenizer {problem}")
    return TokenizerSpec(name, "hf", lang, False, name, ("hf", name))


def _has_sentencepiece() -> bool:
    import importlib.util
    return importlib.util.find_spec("sentencepiece") is not None


def sentencepiece_problem(folder: Path) -> str | None:
    """Why transformers cannot read the tokenizer of a model folder that holds it as a SentencePiece model
    alone (`spiece.model`, no tokenizer.json: Google's T5 and mT5 releases) where the `sentencepiece`
    package is not installed, else None. transformers then falls back to reading the file as tiktoken's and
    says to install `tiktoken`, which does not help."""
    models = sorted(p.name for p in folder.glob("*.model")) if folder.is_dir() else []
    if not models or (folder / "tokenizer.json").is_file() or _has_sentencepiece():
        return None
    return (f"{folder} holds its tokenizer as a SentencePiece model ({', '.join(models)}) without a tokenizer.json, "
            f"and reading it needs the `sentencepiece` package, which is not installed: pip install sentencepiece "
            f"(or, where it is installed, write the tokenizer.json beside it: "
            f"AutoTokenizer.from_pretrained(FOLDER).save_pretrained(FOLDER))")


def local_tokenizer_problem(name: str) -> str | None:
    """Why a tokenizer value that names an existing local file or folder cannot be a tokenizer, found
    without loading it (the spec's check): a file (`resolve_tokenizer` says which folder to give), or a
    folder with none of a tokenizer's files (`folder_hint`); None otherwise (a name, a hub id, a folder
    that may load)."""
    path = Path(name).expanduser()
    if name in TOKENIZERS or not path.exists():
        return None
    if path.is_file():
        try:
            resolve_tokenizer(name)
        except EmbinitError as e:
            return str(e)
    if any((path / f).is_file() for f in HF_TOKENIZER_FILES + GPT2_FILES) or any(path.glob("*.model")):
        return sentencepiece_problem(path) or not_utf8_problem(path)
    return f"tokenizer folder {name!r} holds no tokenizer: {folder_hint(str(path))}"


def not_utf8_problem(folder: Path) -> str | None:
    """Each line of the tokenizer files in `folder` that is not UTF-8 (a Latin-1 vocab.txt), with the fix,
    else None: transformers and `tokenizers` said only "stream did not contain valid UTF-8", and the hint
    then listed vocab.txt among the files the folder lacked."""
    from embinit.errors import each_read
    from embinit.text_files import require_utf8
    files = [folder / f for f in _TEXT_FILES if (folder / f).is_file()]
    try:
        each_read(f"tokenizer folder {str(folder)!r}: files that are not UTF-8",
                  [partial(require_utf8, f) for f in files])
    except EmbinitError as e:
        return str(e)
    return None


def _openai_gpt2(folder: Path) -> bool:
    """Whether `folder` holds GPT-2's tokenizer in OpenAI's original format only (GPT2_FILES, none of the
    Hugging Face tokenizer files, no SentencePiece `.model`)."""
    return (all((folder / f).is_file() for f in GPT2_FILES)
            and not any((folder / f).exists() for f in HF_TOKENIZER_FILES) and not any(folder.glob("*.model")))


def folder_hint(source: str) -> str:
    """For a tokenizer folder transformers cannot load: the files it holds and those a tokenizer needs."""
    folder = Path(source)
    held = sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
    return (f"the folder holds {held}; a tokenizer folder needs tokenizer.json, or vocab.json + merges.txt "
            f"(byte-level BPE, as GPT-2's), or vocab.txt (WordPiece), or a SentencePiece .model, or OpenAI's "
            f"original GPT-2 files {' + '.join(GPT2_FILES)} alone (read as they are; they are vocab.json + "
            f"merges.txt under other names, so renaming them converts the folder)")


def unregistered_hint(name: str) -> str:
    """For a tokenizer value taken as a Hugging Face hub id (a typo such as 'spacey' has that shape): that
    it is no registered name, with the registered ones and the closest ("" for a registered name or a
    folder)."""
    if name in TOKENIZERS or Path(name).expanduser().is_dir():
        return ""
    return str(unknown_name("tokenizer", name, TOKENIZERS))


def find_gpt2_dir(data_dir: Path | None) -> Path | None:
    """The folder holding GPT-2's encoder.json + vocab.bpe: $EMBINIT_GPT2_DIR, else the task's data folder."""
    env = os.environ.get(GPT2_ENV)
    if env:
        folder = Path(env).expanduser()
        missing = [f for f in GPT2_FILES if not (folder / f).is_file()]
        if missing:
            raise EmbinitError(f"${GPT2_ENV}={env} lacks the GPT-2 tokenizer files {missing}")
        return folder
    if data_dir is not None and all((Path(data_dir) / f).is_file() for f in GPT2_FILES):
        return Path(data_dir)
    return None
