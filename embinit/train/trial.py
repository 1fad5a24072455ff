"""`run_trial`: one transformer, one task, one init, one seed -> one `TrialResult`.

The loop reads top to bottom: set up (every user error raised here), maybe resume from `last.pt`,
then per epoch: train, validate, keep the best checkpoint by the task's criterion, write `last.pt`,
call `on_epoch_end`, maybe stop early. Finally the best checkpoint's test metrics and embedding
statistics. A NaN/inf loss ends the trial with status "diverged" (no test metrics are computed for it).
"""

from __future__ import annotations

import time

import torch

from embinit.config import TrialConfig
from embinit.train.callbacks import fire
from embinit.train.graphed import GraphedStep
from embinit.train.lifecycle import epoch_batches, epoch_end, finish, start
from embinit.train.loop import train_epoch
from embinit.train.result import TrialResult
from embinit.train.prepare import prepare


def run_trial(cfg: TrialConfig, out_dir=None, callbacks=(), resume: bool = True,
              cache_dir=None) -> TrialResult:
    """The one-member case of `embinit.train.lifecycle`: its step is `loop.train_epoch`'s, or with
    `cuda_graphs` the CUDA-graphed one (`embinit.train.graphed`)."""
    t0 = time.perf_counter()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    m = start(cfg, prepare(cfg, cache_dir), out_dir, callbacks, resume)
    step = GraphedStep.for_member(m) if m.s.cfg.cuda_graphs else None   # None: the eager step
    fire(m.callbacks, "on_train_start", m.ctx)
    for epoch in range(m.start_epoch, m.s.cfg.epochs + 1):
        if m.stopped:
            break
        batches = epoch_batches(m, epoch)
        stats = train_epoch(m.model, batches, m.task, m.optimizer, m.ctx, m.callbacks, m.task.autocast,
                            step=step)
        if stats.diverged_step is not None:
            m.status, m.diverged_step = "diverged", stats.diverged_step
            break
        epoch_end(m, epoch, stats.loss, stats.tokens, stats.seconds, t0)
    return finish(m, {"mode": "separate"}, t0)
