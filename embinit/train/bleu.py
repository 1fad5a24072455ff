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
"""

from __future__ import annotations

from typing import Callable, Sequence

from sacrebleu.metrics import BLEU

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


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str], lowercase: bool) -> tuple[float, str]:
    """(BLEU score 0-100, sacrebleu signature) for detokenized hypotheses and raw references."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    # force=True only silences sacrebleu's "looks tokenized" warning (raw references may end in " .");
    # it does not change the score or the signature's tokenizer (13a)
    bleu = BLEU(lowercase=lowercase, force=True)
    score = bleu.corpus_score(list(hyps), [list(refs)])
    return float(score.score), str(bleu.get_signature())


def is_lowercased(info: dict, tokens: Sequence[str]) -> bool:
    """Whether the task lowercased its text: `info["lowercase"]` when the task says so, otherwise
    inferred from the vocabulary (no token with an upper-case letter)."""
    if isinstance(info, dict) and "lowercase" in info:
        return bool(info["lowercase"])
    return not any(t != t.lower() for t in tokens if t not in _DROP)
