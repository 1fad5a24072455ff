"""A fourth task kind, added the way docs/architecture.md ("Adding a task") says: this module and two
registry calls (`register`), nothing else. `toy_seq2seq` is sequence-to-sequence: reverse a list of
words. It reuses the encoder-decoder, the pair builder, reader and text function of translation, but has
its own Task class and its own metric, `exact` (the share of greedy outputs equal to the reference),
by which it keeps its best checkpoint.
"""

from __future__ import annotations

import random

from embinit import task_registry
from embinit.task_types import KindEntry, TaskDefaults, TaskEntry
from embinit.tasks.raw import RawData
from embinit.train.decoding import translate
from embinit.train.loop import mean_loss
from embinit.train.translation import TranslationTask

KIND, TASK = "toy_seq2seq", "toy_reverse"
WORDS = ("ka", "lo", "mi", "nu", "po", "ri", "sa", "tu")
SIZES = {"train": 400, "val": 40, "test": 40}


def generate(task: str, seed: int, splits=None, noise: float = 0.0) -> RawData:
    """Source: 2-5 random words; target: the same words reversed."""
    rng = random.Random(f"{task}:{seed}")
    out = {}
    for split, n in SIZES.items():
        rows = [[rng.choice(WORDS) for _ in range(rng.randint(2, 5))] for _ in range(n)]
        out[split] = [(" ".join(r), " ".join(reversed(r))) for r in rows]
    return RawData(KIND, out, ["val", "test"], f"generated(seed={seed})")


class ReverseTask(TranslationTask):
    """Teacher-forced like translation; validated and tested by exact match instead of BLEU."""

    kind = KIND

    @classmethod
    def from_setup(cls, setup, autocast) -> "ReverseTask":
        task = cls(setup.data, setup.cfg, setup.device, autocast)
        task.tracked = [("val/exact", "max")]
        return task

    def _scores(self, model, split: str, prefix: str) -> dict:
        pairs = self.data.splits[split]
        hyps = translate(model, [s for s, _ in pairs], device=self.device, autocast=self.autocast())
        exact = sum(list(h) == list(t) for h, (_, t) in zip(hyps, pairs)) / len(pairs)
        return {f"{prefix}/loss": mean_loss(model, self.eval_batches(split), self, self.autocast),
                f"{prefix}/exact": exact}

    def validate(self, model) -> dict:
        return self._scores(model, self.val_split, "val")

    def test(self, model) -> dict:
        return self._scores(model, self.test_split, "test") if self.test_split else {}


TRANSLATION = task_registry.KINDS["translation"]
KIND_ENTRY = KindEntry("toy: reverse a word list; exact match", ("src", "tgt"), TRANSLATION.model,
                       f"{__name__}:ReverseTask", TRANSLATION.build, TRANSLATION.text)
TASK_ENTRY = TaskEntry(
    TaskDefaults(KIND, "reverse 2-5 words (tests)", epochs=4, batch_size=16, lr=3e-3, min_freq=1, layers=1,
                 heads=2, ff_dim=32, d_model=16, max_len=8, metric="exact"),
    primary="test/exact", selection=("val/exact", "max"), reported=("test/exact",), curve="val/exact",
    metric_ranges={"exact": (0.0, 1.0)}, generate=f"{__name__}:generate", tokenizer="whitespace")


def register() -> None:
    task_registry.register_kind(KIND, KIND_ENTRY)
    task_registry.register_task(TASK, TASK_ENTRY)


def unregister() -> None:
    task_registry.unregister(task=TASK, kind=KIND)
