"""Trainer callbacks: objects with any of `on_train_start(ctx)`, `on_step_end(ctx, step, loss)`,
`on_epoch_end(ctx, epoch, metrics)` and `on_train_end(ctx, result)`. The sweep uses them to report to
Ray Tune and MLflow; the trainer knows nothing of either. An exception raised by a callback stops the
trial (after `on_epoch_end` the epoch's `last.pt` is already written, so a rerun resumes there)."""

from __future__ import annotations

from dataclasses import dataclass
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


def fire(callbacks, event: str, *args) -> None:
    for cb in callbacks:
        fn = getattr(cb, event, None)
        if fn is not None:
            fn(*args)
