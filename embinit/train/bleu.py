"""Corpus BLEU with sacrebleu, on detokenized hypotheses against the raw reference sentences.

`<unk>` tokens stay in the hypotheses by default: a word the model could not name is a miss, and
dropping it raises BLEU (the brevity penalty and the n-gram counts see a shorter, cleaner output). A kept
`<unk>` is written as one word, `UNK_WORD` ("⁇", SentencePiece's mark for an unknown piece), that no
reference contains: one missed word, as the model missed one. Written as "<unk>", sacrebleu's 13a
tokenizer made it three ("<", "unk", ">"), so each cost three missed tokens and lengthened the output:
the reference sentences of Multi30k's test set, with the words outside the training vocabulary (min.
frequency 2; 1.7% of the tokens) as `<unk>`, scored 92.05 that way, 95.62 with one word and 95.83 with
them dropped; a D = 50 GloVe_Xavier model's test output (3.4% `<unk>`) 26.11, 27.66 and 27.77 (CODE_VERSION
3). `drop_unk=True` (a trial's `extras: {bleu_drop_unk: true}`) drops them
instead; the choice is appended to the sacrebleu signature as `|unk:one-word` or `|unk:dropped` (runs of
code version 2 and before say `|unk:kept`: three tokens), so every logged score says which it is. `<pad>`,
`<bos>` and `<eos>` are always dropped (they are not words). Case: when the task's tokenization lowercased the text,
BLEU is computed case-insensitively (recorded in the signature as `case:lc`), otherwise case-sensitively.
References: with a word-level tokenizer, the raw target text; with a sub-word tokenizer, that text as the
tokenizer writes it back (`Backend.references`, embinit.tasks.tokenizer_backends), the way the hypotheses are
written, so a perfect output scores 100; the signature then ends in `|ref:tokenizer`.
Tokenizer: sacrebleu's for the target language (`embinit.bleu_rules`: `zh`, `ja-mecab`, `ko-mecab`, else
`13a`), named in the signature (`tok:`).
"""

from __future__ import annotations

from typing import Callable, Sequence

from sacrebleu.metrics import BLEU

from embinit.bleu_rules import DEFAULT
from embinit.vocab import BOS, EOS, PAD, UNK

_DROP = {UNK, PAD, BOS, EOS}
_SPECIALS = {PAD, BOS, EOS}   # never words: dropped whatever drop_unk says
UNK_WORD = "\u2047"           # a kept <unk> in a scored hypothesis: one token under every sacrebleu tokenizer


def detokenize_all(hyps: Sequence[Sequence[str]], detokenize: Callable[[list[str]], str],
                   drop_unk: bool = False) -> list[str]:
    """The hypotheses as BLEU scores them: specials dropped, `<unk>` dropped (`drop_unk`) or one word."""
    if drop_unk:
        return [detokenize([t for t in h if t not in _DROP]) for h in hyps]
    return [one_word_unk(detokenize([t for t in h if t not in _SPECIALS])) for h in hyps]


def one_word_unk(text: str) -> str:
    """`text` with each "<unk>" written as the word `UNK_WORD`, spaced apart from its neighbours (a
    sub-word detokenizer may glue it to them). The text is replaced after detokenizing, because a
    byte-level BPE cannot write a character its byte table lacks."""
    return " ".join(text.replace(UNK, f" {UNK_WORD} ").split()) if UNK in text else text


def unk_signature(signature: str, drop_unk: bool) -> str:
    """The sacrebleu signature with the `<unk>` choice appended (`...|unk:one-word` or `...|unk:dropped`)."""
    return f"{signature}|unk:{'dropped' if drop_unk else 'one-word'}"


class ReferenceBleu:
    """Corpus BLEU against one fixed list of references (a split's, for the whole trial): sacrebleu reads
    them (tokenizes them, counts their n-grams and lengths) once, here, and each call scores hypotheses
    against what it kept, not the references again at every evaluation. Same score and signature as
    sacrebleu's `corpus_score(hyps, [refs])`."""

    def __init__(self, refs: Sequence[str], lowercase: bool, tokenize: str = DEFAULT):
        self.refs, self.lowercase, self.tokenize = list(refs), lowercase, tokenize
        # force=True only silences sacrebleu's "looks tokenized" warning (raw references may end in " .");
        # it does not change the score or the signature's tokenizer
        self._bleu = self._metric(references=[self.refs]) if self.refs else None

    def _metric(self, **kwargs) -> BLEU:
        return BLEU(lowercase=self.lowercase, force=True, tokenize=self.tokenize, **kwargs)

    def __call__(self, hyps: Sequence[str]) -> tuple[float, str]:
        """(BLEU score 0-100, sacrebleu signature) for detokenized hypotheses, one per reference."""
        if len(hyps) != len(self.refs):
            raise ValueError(f"{len(hyps)} hypotheses for {len(self.refs)} references")
        if self._bleu is None:   # no references: sacrebleu keeps none, so they are given as they are
            bleu = self._metric()
            return float(bleu.corpus_score(list(hyps), [self.refs]).score), str(bleu.get_signature())
        return float(self._bleu.corpus_score(list(hyps), None).score), str(self._bleu.get_signature())


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool,
                tokenize: str = DEFAULT) -> tuple[float, str]:
    """(BLEU score 0-100, sacrebleu signature) for detokenized hypotheses and raw references, once (a
    trainer that scores the same references again keeps a `ReferenceBleu`)."""
    return ReferenceBleu(refs, lowercase, tokenize)(hyps)


def is_lowercased(info: dict, tokens: Sequence[str]) -> bool:
    """Whether the task lowercased its text: `info["lowercase"]` when the task says so, otherwise
    inferred from the vocabulary (no token with an upper-case letter)."""
    if isinstance(info, dict) and "lowercase" in info:
        return bool(info["lowercase"])
    return not any(t != t.lower() for t in tokens if t not in _DROP)
