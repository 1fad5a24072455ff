"""`TaskData`: what a loaded task hands to the models and trainers (see docs/architecture.md, "tasks")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from embinit.vocab import BOS, EOS, PAD, Vocab


@dataclass
class TaskData:
    """One task, tokenized and numericalized.

    splits:
      translation     {"train"|"val"|"test": [(src_ids, tgt_ids), ...]}
      classification  {"train"|"dev"|...: [(ids, label)]}, sentence pairs: [(ids_a, ids_b, label)]
      lm              {"train"|"valid"|"test": [id, ...]}: one flat stream per split, <eos> after each line
                      (blank lines too, as WikiText counts tokens)
    No <bos>/<eos> is added to translation or classification sequences; each is at most `max_len` ids
    long (longer ones are truncated and counted in `info["truncated"]`), so a model that adds <bos> and
    <eos> needs `max_len + 2` positions (a sentence pair: each side is truncated on its own). LM streams
    are not truncated: the trainer cuts them into blocks.
    """

    name: str
    kind: str                                   # "translation" | "classification" | "lm"
    vocab: Vocab                                # target side (translation) or the only vocabulary
    src_vocab: Vocab | None                     # translation only
    splits: dict[str, list]
    eval_splits: list[str]
    references: dict[str, list[str]] = field(default_factory=dict)  # translation: raw refs per eval split
    detokenize: Callable[[list[str]], str] = lambda tokens: " ".join(tokens)
    num_labels: int | None = None               # classification only
    info: dict[str, Any] = field(default_factory=dict)

    def ids_to_text(self, ids: Iterable[int], vocab: Vocab | None = None) -> str:
        """Model output ids -> text for BLEU: stops at <eos>, drops <pad>/<bos>, keeps <unk>."""
        vocab = vocab or self.vocab
        tokens = []
        for i in ids:
            tok = vocab.tokens[int(i)]
            if tok == EOS:
                break
            if tok not in (PAD, BOS):
                tokens.append(tok)
        return self.detokenize(tokens)


# A side's training split as id sequences, per kind (the kind registry's `text`; what the `focus` OOV
# rule learns its similarities from).

def _train(data: TaskData) -> list:
    return data.splits["train"] if "train" in data.splits else next(iter(data.splits.values()))


def pair_text(data: TaskData, side: str) -> list[list[int]]:
    """Translation pairs: the source or the target sentences."""
    return [list(pair[0 if side == "src" else 1]) for pair in _train(data)]


def labelled_text(data: TaskData, side: str) -> list[list[int]]:
    """Classification: every text (both of a pair)."""
    return [list(text) for item in _train(data) for text in item[:-1]]


def stream_text(data: TaskData, side: str) -> list[list[int]]:
    """An LM stream cut at `<eos>`."""
    eos, out, line = data.vocab.index("<eos>"), [], []
    for t in _train(data):
        if t == eos:
            out.append(line)
            line = []
        else:
            line.append(t)
    return out + ([line] if line else [])
