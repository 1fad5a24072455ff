"""Corpus BLEU with sacrebleu, on detokenized hypotheses against the raw reference sentences.

`<unk>` tokens are dropped from hypotheses before detokenizing: with sacrebleu's default 13a tokenizer
a literal "<unk>" would become three tokens ("<", "unk", ">") and cost 1-2 BLEU points on outputs with
many unknowns, while no reference contains it. Case: when the task's tokenization lowercased the text,
BLEU is computed case-insensitively (recorded in the signature as `case:lc`), otherwise case-sensitively.
"""

from __future__ import annotations

from typing import Callable, Sequence

from sacrebleu.metrics import BLEU

from embinit.vocab import BOS, EOS, PAD, UNK

_DROP = {UNK, PAD, BOS, EOS}


def detokenize_all(hyps: Sequence[Sequence[str]], detokenize: Callable[[list[str]], str]) -> list[str]:
    return [detokenize([t for t in h if t not in _DROP]) for h in hyps]


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
