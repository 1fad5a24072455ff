"""The raw (untokenized) form of every task (each real task's local file layout and labels are its
`Layout` in the task registry, embinit.task_registry).

Every source (local files, Hugging Face `datasets`, the synthetic generators) produces a `RawData`;
tokenization, vocabularies and caching then work the same for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embinit.errors import EmbinitError
from embinit.task_types import Layout


class MissingFiles(EmbinitError):
    """A data folder lacks a file a split needs (`tasks.local.find_files`, `tasks.exports.files`)."""


@dataclass
class RawData:
    """splits: translation [(src, tgt)], classification [(text, label)] or [(text_a, text_b, label)]
    (label already an int), lm [line] (stripped; blank lines kept: every line ends with <eos>, WikiText's
    convention, so word-level token counts equal the published ones)."""

    kind: str
    splits: dict[str, list]
    eval_splits: list[str]
    loaded_from: str
    label_names: list[str] | None = None
    extra_info: dict = field(default_factory=dict)


LM_SPLITS = ("train", "valid", "test")


def lm_split_map(task: str, stream: bool, train_split: str | None, eval_split: str | None) -> dict[str, str]:
    """TaskData split name -> source split name for LM (stream) tasks. By default train/valid/test; with
    `train_split="valid", eval_split="test"` (e.g. a WikiText-2 copy without its train file) the model
    trains on the valid file, validates on the test file, and there is no separate test split."""
    if not stream:
        if train_split is not None or eval_split is not None:
            raise EmbinitError(f"train_split/eval_split apply to language-model tasks only, not {task!r}")
        return {}
    train = train_split or "train"
    evals = eval_split or "valid"
    for arg, value in (("train_split", train), ("eval_split", evals)):
        if value not in LM_SPLITS:
            raise EmbinitError(f"{arg}={value!r} is not a split of {task!r}; choose from {list(LM_SPLITS)}")
    if train == evals:
        raise EmbinitError(f"train_split and eval_split are both {train!r}; evaluation needs held-out data")
    mapping = {"train": train, "valid": evals}
    rest = [s for s in LM_SPLITS if s not in (train, evals)]
    if rest == ["test"]:
        mapping["test"] = "test"
    return mapping


def eval_split_note(extras: dict | None) -> str | None:
    """What a language-model trial's `val/*` metrics were measured on, said where it is not the task's
    validation split: `val/* is the test split (eval_split: test)`, with `; no separate test split` where
    `lm_split_map` leaves none (`train_split: valid, eval_split: test`: `test/*` is never logged). The
    metric names stay `val/*` whatever the split (the trainer selects on them, readers of existing runs
    read them); the trial's run and the report say this instead. None for the default split."""
    extras = extras or {}
    evals = extras.get("eval_split")
    if evals in (None, "valid"):
        return None
    train = extras.get("train_split") or "train"
    rest = [s for s in LM_SPLITS if s not in (train, evals)]
    note = f"val/* is the {evals} split (eval_split: {evals})"
    return note if rest == ["test"] else note + "; no separate test split"


def label_id(value: str, layout: Layout, where: str) -> int:
    """A label as written in the data -> its id; unknown values are an error naming the valid ones."""
    try:
        return layout.labels.index(value.strip())
    except ValueError:
        raise EmbinitError(f"{where}: unknown label {value!r}; valid labels: {list(layout.labels)}") from None
