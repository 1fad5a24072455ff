"""Loaded tokenizers: the backend of each kind a `TokenizerSpec` names (`load_backend`), and the
detokenizers that write a model's tokens back as text (`detokenizer`). Resolving a name to a spec is
`embinit.tasks.tokenization`'s (cheap, torch-free); this module imports it, never the other way. The
backends import spaCy, `tokenizers` or transformers on use.

Contract, tested once for every entry (tests/test_tasks_tokenization.py): the same text gives the same
tokens; a sub-word backend writes its tokens back to text (`to_string`) that tokenizes to the same
tokens (the BLEU references, `Backend.references`); `full_vocab()` is the whole vocabulary in id order,
without duplicates, when the backend has one; the spec's `word_level` agrees with `WORD_LEVEL`.
Detokenizers are picklable and load lazily.
"""

from __future__ import annotations

import re
from pathlib import Path

from embinit.errors import EmbinitError, empty_tokenizer, offline_miss
from embinit.hf_cache import split_revision
from embinit.tasks.tokenization import (GPT2_ENV, GPT2_FILES, TokenizerSpec, folder_hint, not_utf8_problem,
                                        sentencepiece_problem,
                                        unregistered_hint)
from embinit.vocab import BOS, EOS, PAD


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
            if (why := sentencepiece_problem(Path(spec.source))) is not None:
                raise EmbinitError(f"cannot load tokenizer {spec.source!r}: {why}") from None
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
BACKENDS = {"spacy": SpacyBackend, "whitespace": WhitespaceBackend, "gpt2_files": Gpt2FilesBackend,
             "hf": HfBackend}


def load_backend(spec: TokenizerSpec) -> Backend:
    """The tokenizer `spec` names, loaded."""
    return BACKENDS[spec.kind](spec)


def detokenizer(spec: TokenizerSpec):
    """tokens -> text for the tokenizer `spec` names (picklable; a sub-word one loads it on first use)."""
    return WordDetokenizer() if spec.word_level else SubwordDetokenizer(spec)

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
            self._backend = load_backend(self.spec)
        return self._backend.to_string([t for t in tokens if t not in (PAD, BOS, EOS)]).strip()

    def __getstate__(self):  # ship the spec, not the loaded tokenizer
        return {"spec": self.spec, "_backend": None}
