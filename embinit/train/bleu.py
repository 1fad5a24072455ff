"""Corpus BLEU with sacrebleu, on detokenized hypotheses against the raw reference sentences.

`<unk>` tokens stay in the hypotheses by default: a word the model could not name is a miss, and
dropping it raises BLEU (the brevity penalty and the n-gram counts see a shorter, cleaner output: +0.22
BLEU at a 3% unknown-word rate, issue 23). Under sacrebleu's 13a tokenizer a kept "<unk>" is three
tokens ("<", "unk", ">") that no reference contains. `drop_unk=True` (a trial's `extras:
{bleu_drop_unk: true}`) drops them instead, as embinit did before; the choice is appended to the
sacrebleu signature as `|unk:kept` or `|unk:dropped`, so every logged score says which it is. `<pad>`,
`<bos>` and `<eos>` are always dropped (they are not words). Case: when the task's tokenization lowercased the text,
BLEU is computed case-insensitively (recorded in the signature as `case:lc`), otherwise case-sensitively.
References: with a word-level tokenizer, the raw target text; with a sub-word tokenizer, that text as the
tokenizer writes it back (`Backend.references`, embinit.tasks.tokenization), the way the hypotheses are
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


def detokenize_all(hyps: Sequence[Sequence[str]], detokenize: Callable[[list[str]], str],
                   drop_unk: bool = False) -> list[str]:
    drop = _DROP if drop_unk else _SPECIALS
    return [detokenize([t for t in h if t not in drop]) for h in hyps]


def unk_signature(signature: str, drop_unk: bool) -> str:
    """The sacrebleu signature with the `<unk>` choice appended (`...|unk:kept` or `...|unk:dropped`)."""
    return f"{signature}|unk:{'dropped' if drop_unk else 'kept'}"


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
