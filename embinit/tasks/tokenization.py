"""Tokenizers: word-level (spaCy, whitespace) for word-vector inits, sub-word (GPT-2 BPE, any Hugging Face
tokenizer) for sub-word inits.

The registry `TOKENIZERS` maps each tokenizer name (`spacy`, `whitespace`, `gpt2`) to its resolver, a plain
function `(lang, lowercase, data_dir) -> TokenizerSpec`; any other value is a Hugging Face tokenizer
folder or hub id. `embinit.config` (`WORD_LEVEL`) and `service.paths` read the names from here. Importing
this module is cheap and torch-free (the backends import spaCy, `tokenizers` or transformers on use).
Contract, tested once for every entry (tests/test_tasks_tokenization.py): the same text gives the same
tokens; a sub-word backend writes its tokens back to text (`to_string`) that tokenizes to the same
tokens (the BLEU references, `Backend.references`); `full_vocab()` is the whole vocabulary in id order,
without duplicates, when the backend has one; the spec's `word_level` agrees with `WORD_LEVEL`.

A tokenizer is resolved in two steps so that a cache hit never pays for loading one: `resolve_tokenizer`
only looks at names and file identities (cheap, gives the cache-key `identity`); `TokenizerSpec.load()`
builds the backend when text really has to be tokenized. Detokenizers are picklable and load lazily.

Casing: GloVe 6B is uncased, so word-level tokens are lowercased by default (`lowercase=True`, after
tokenization, as torchtext-era Multi30k pipelines do). Sub-word tokenizers keep their own normalization
(lowercasing GPT-2's cased BPE input would only waste its vocabulary), whatever `lowercase` says.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from embinit.errors import EmbinitError, empty_tokenizer, offline_miss, unknown_name
from embinit.hf_cache import path_shaped, revision_problem, split_revision
from embinit.vocab import BOS, EOS, PAD

# The registered tokenizers that cut whole words (also their backend kinds): trial keys ask this without
# resolving the name (`TrialConfig._subword_bleu_references`).
WORD_LEVEL = ("spacy", "whitespace")
GPT2_FILES = ("encoder.json", "vocab.bpe")
GPT2_ENV = "EMBINIT_GPT2_DIR"
# A Hugging Face tokenizer folder's own files: a folder with none of them but GPT2_FILES is OpenAI's
# original GPT-2 format (encoder.json is vocab.json, vocab.bpe is merges.txt), read by Gpt2FilesBackend:
# AutoTokenizer refused it ("Couldn't instantiate the backend tokenizer from one of: ").
HF_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "vocab.txt")
# The text files of a tokenizer folder its libraries read as UTF-8 (`not_utf8_problem`).
_TEXT_FILES = (*HF_TOKENIZER_FILES, *GPT2_FILES, "tokenizer_config.json", "special_tokens_map.json",
               "added_tokens.json")
# Files in a Hugging Face model folder that do not define the tokenizer (weights): not in the identity.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".onnx", ".ckpt")


def _file_id(path: Path) -> list:
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


@dataclass(frozen=True)
class TokenizerSpec:
    """A resolved tokenizer: what it is (`identity`, for cache keys) and how to load it."""

    name: str                  # as the user gave it: a `TOKENIZERS` name, or an HF path/id
    kind: str                  # "spacy" | "whitespace" | "gpt2_files" | "hf"
    lang: str                  # spaCy language ("de", "en"); ignored by the others
    lowercase: bool            # effective: only word-level tokenizers lowercase
    source: str                # spaCy version, a GPT-2 folder, or the HF path/id
    identity: tuple

    @property
    def word_level(self) -> bool:
        return self.kind in WORD_LEVEL

    def load(self) -> "Backend":
        return _BACKENDS[self.kind](self)

    def detokenizer(self):
        return WordDetokenizer() if self.word_level else SubwordDetokenizer(self)


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


# name -> resolver(lang, lowercase, data_dir): cheap, loads nothing (`TokenizerSpec.load()` does).
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
        return not_utf8_problem(path)
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


class Backend:
    """A loaded tokenizer. `full_vocab()` lists the tokenizer's own vocabulary in id order (sub-word only)."""

    lowercases = False
    round_trips = False   # sub-word: BLEU references are the text as the tokenizer writes it back

    def tokenize_batch(self, texts: list[str]) -> list[list[str]]:
        raise NotImplementedError

    def references(self, texts: list[str]) -> list[str]:
        """The BLEU references for raw target `texts`, as the model's output can write them: lowercased
        when the tokenizer lowercases (word level); for a sub-word tokenizer, the text tokenized and
        written back by its own `to_string`, as the hypotheses are (`SubwordDetokenizer`). WordPiece
        writes "man's" back as "man ' s" and "t-shirt" as "t - shirt", which sacrebleu's 13a tokenizer
        does not split again: against the raw text a perfect output scored 97.8 BLEU on Multi30k's test
        set (61 of 1,000 sentences unreachable); against these, 100."""
        if self.round_trips:
            return [self.to_string(tokens).strip() for tokens in self.tokenize_batch(texts)]
        return [t.lower() for t in texts] if self.lowercases else list(texts)

    def full_vocab(self) -> list[str] | None:
        return None

    def to_string(self, tokens: list[str]) -> str:
        raise NotImplementedError


class SpacyBackend(Backend):
    def __init__(self, spec: TokenizerSpec):
        import spacy  # slow import (~2 s): only when text is really tokenized
        self.nlp = spacy.blank(spec.lang)
        self.lowercases = spec.lowercase

    def tokenize_batch(self, texts):
        # Whitespace tokens (double spaces, U+00A0 in Multi30k's German side) are not words.
        lower = self.lowercases
        return [[t.text.lower() if lower else t.text for t in doc if not t.is_space]
                for doc in self.nlp.tokenizer.pipe(texts, batch_size=1000)]


class WhitespaceBackend(Backend):
    def __init__(self, spec: TokenizerSpec):
        self.lowercases = spec.lowercase

    def tokenize_batch(self, texts):
        return [(t.lower() if self.lowercases else t).split() for t in texts]


class Gpt2FilesBackend(Backend):
    """GPT-2 byte-level BPE from OpenAI's encoder.json + vocab.bpe, via the `tokenizers` library.
    (transformers 5's GPT2TokenizerFast(vocab_file=..., merges_file=...) silently builds an empty
    vocabulary from these files, so it is not used.)"""

    round_trips = True

    def __init__(self, spec: TokenizerSpec):
        from tokenizers import ByteLevelBPETokenizer
        folder = Path(spec.source)
        try:
            self.tok = ByteLevelBPETokenizer(str(folder / "encoder.json"), str(folder / "vocab.bpe"))
        except Exception as e:  # the library raises plain Exceptions on malformed files
            why = not_utf8_problem(folder) or str(e)
            raise EmbinitError(f"cannot read GPT-2 tokenizer files in {folder}: {why}") from None

    def tokenize_batch(self, texts):
        return [e.tokens for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def full_vocab(self):
        vocab = self.tok.get_vocab()
        return sorted(vocab, key=vocab.__getitem__)

    def to_string(self, tokens):
        return self.tok.decoder.decode(tokens)


def _from_pretrained(source: str):
    """The one call that may touch the network (tests replace it)."""
    from transformers import AutoTokenizer  # slow import (~4 s): only when needed
    repo, revision = split_revision(source)   # a hub id may pin its snapshot: <id>@<revision>
    return AutoTokenizer.from_pretrained(repo, revision=revision)


class HfBackend(Backend):
    """Any Hugging Face tokenizer (a local folder or a hub id) through AutoTokenizer."""

    round_trips = True

    def __init__(self, spec: TokenizerSpec):
        try:
            self.tok = _from_pretrained(spec.source)
        except Exception as e:
            if Path(spec.source).is_dir() and (why := not_utf8_problem(Path(spec.source))) is not None:
                raise EmbinitError(f"cannot load tokenizer {spec.source!r}: {why}") from None
            unregistered = unregistered_hint(spec.name)
            hint = (f"put GPT-2's {' and '.join(GPT2_FILES)} in a folder and set ${GPT2_ENV} to it (or into "
                    f"the task's data folder)" if spec.name == "gpt2" else
                    folder_hint(spec.source) if Path(spec.source).is_dir() else
                    "give a local folder with the tokenizer files (tokenizer.json, vocab.txt, ...)"
                    + (f"; or a tokenizer name: {unregistered}" if unregistered else ""))
            if (why := offline_miss(spec.source)) is not None:   # the revision asked, the ones cached
                raise EmbinitError(f"cannot load tokenizer {spec.source!r}: {why}; {hint}") from None
            raise EmbinitError(f"cannot load tokenizer {spec.source!r} with transformers.AutoTokenizer "
                               f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                               f"{'' if Path(spec.source).is_dir() else 'offline? '}{hint}") from None
        if (error := empty_tokenizer(self.tok, spec.source)) is not None:
            raise error
        probe = self.tok.tokenize("Ab")
        self.lowercases = probe == self.tok.tokenize("ab")

    def tokenize_batch(self, texts):
        backend = getattr(self.tok, "backend_tokenizer", None)
        if backend is not None:  # Rust fast path: same tokens as tokenize(), batched
            return [e.tokens for e in backend.encode_batch(texts, add_special_tokens=False)]
        return [self.tok.tokenize(t) for t in texts]

    def full_vocab(self):
        vocab = self.tok.get_vocab()
        return sorted(vocab, key=vocab.__getitem__)

    def to_string(self, tokens):
        return self.tok.convert_tokens_to_string(tokens)


# Backend kind (`TokenizerSpec.kind`, set by the resolver) -> class.
_BACKENDS = {"spacy": SpacyBackend, "whitespace": WhitespaceBackend, "gpt2_files": Gpt2FilesBackend,
             "hf": HfBackend}

# Word-level detokenization: join with spaces, re-attach punctuation and clitics the way English text
# writes them ("a man 's t - shirt ." -> "a man's t-shirt.").
_NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", ")", "]", "}", "%", "...", "n't", "'s", "'re", "'ve",
                    "'m", "'ll", "'d", "’s"}
_NO_SPACE_AFTER = {"(", "[", "{", "$", "#"}
_WORDLIKE = re.compile(r"\w$")


class WordDetokenizer:
    """tokens -> text for word-level tokenizers (picklable; no spaCy needed)."""

    def __call__(self, tokens: list[str]) -> str:
        out: list[str] = []
        glue_next, open_quote = False, False
        for tok in (t for t in tokens if t not in (PAD, BOS, EOS)):
            attach = glue_next or not out
            glue_next = False
            if tok in _NO_SPACE_BEFORE:
                attach = True
            elif tok == "-" and out and _WORDLIKE.search(out[-1]):
                attach, glue_next = True, True   # infix hyphen: "t - shirt" -> "t-shirt"
            elif tok == '"':
                attach = attach or open_quote
                glue_next = not open_quote
                open_quote = not open_quote
            elif tok in _NO_SPACE_AFTER:
                glue_next = True
            out.append(tok if attach else " " + tok)
        return "".join(out)


class SubwordDetokenizer:
    """tokens -> text with the tokenizer's own convert_tokens_to_string; loads the tokenizer on first use."""

    def __init__(self, spec: TokenizerSpec):
        self.spec = spec
        self._backend = None

    def __call__(self, tokens: list[str]) -> str:
        if self._backend is None:
            self._backend = self.spec.load()
        return self._backend.to_string([t for t in tokens if t not in (PAD, BOS, EOS)]).strip()

    def __getstate__(self):  # ship the spec, not the loaded tokenizer
        return {"spec": self.spec, "_backend": None}
