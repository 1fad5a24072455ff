"""Trainer callbacks: objects with any of `on_train_start(ctx)`, `on_step_end(ctx, step, loss)`,
`on_epoch_end(ctx, epoch, metrics)` and `on_train_end(ctx, result)`. The sweep uses them to report to
Ray Tune and MLflow; the trainer knows nothing of either. An exception raised by a callback stops the
trial (after `on_epoch_end` the epoch's `last.pt` is already written, so a rerun resumes there).

Under fused execution (embinit.train.fused) a member's `ctx.model` holds its weights as of the last
epoch end, except at a step where one of its callbacks' optional `needs_weights(step)` is true: the
member's current weights are copied into it before its `on_step_end`. In each event the group's
members fire in the order of their callbacks' optional `step_order` (default 0): a callback that reads
what another trial's callback writes at the same step (a KNN snapshot) gives itself a higher one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainContext:
    cfg: Any                  # the resolved TrialConfig
    model: Any
    data: Any                 # the task's TaskData
    out_dir: Path | None
    step: int = 0             # optimizer steps so far
    epoch: int = 0            # current (1-based) epoch; 0 before the first
    epoch_steps: int = 0      # number of batches in the current epoch (for progress bars)
    history: list = field(default_factory=list)  # the ended epochs' metrics; a resumed trial's from its checkpoint


def fire(callbacks, event: str, *args) -> None:
    for cb in callbacks:
        fn = getattr(cb, event, None)
        if fn is not None:
            fn(*args)


def needs_weights(callbacks, step: int) -> bool:
    """Whether a callback's `on_step_end(step)` reads the model's current weights."""
    return any(getattr(cb, "needs_weights", None) is not None and cb.needs_weights(step) for cb in callbacks)


def step_order(callbacks) -> int:
    """Where these callbacks' trial fires among a fused group's members (writers before readers)."""
    return max((getattr(cb, "step_order", 0) for cb in callbacks), default=0)
