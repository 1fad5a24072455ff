"""The shared inner loops: one training epoch (with divergence detection) and a token-mean loss."""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from embinit.train.callbacks import fire

SYNC_EVERY = 25   # steps between loss reads on an accelerator (see sync_interval)


@dataclass
class EpochStats:
    loss: float                    # token-weighted mean training loss
    tokens: int                    # non-pad tokens fed to the model (source + target for translation)
    seconds: float
    diverged_step: int | None = None


def autocast_for(precision: str, device: torch.device, cache: bool = True):
    """A factory of autocast contexts: bf16 autocast, or nothing for fp32. `cache=False` turns off
    autocast's cache of weight casts, as a CUDA-graph capture needs (embinit.train.graphed)."""
    if precision == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)
    return nullcontext


def sync_interval(device: torch.device) -> int:
    """Steps between host reads of the training loss. On CPU a read costs nothing, so every step (the
    divergence check then stops before the bad step's update); on an accelerator a read waits for the
    queued kernels and starves the device, so every SYNC_EVERY steps."""
    return 1 if device.type == "cpu" else SYNC_EVERY


class LossMeter:
    """Per-step losses kept on the device and read in one transfer every `every` steps (`flush`).
    Token counts come from the host-side batch, so nothing else waits on the device."""

    def __init__(self):
        self.pending: list[tuple[int, torch.Tensor, int]] = []   # (global step, loss, n_targets)
        self.total, self.weight, self.last = 0.0, 0, math.nan

    def add(self, step: int, loss: torch.Tensor, n_targets: int) -> None:
        self.pending.append((step, loss.detach(), n_targets))

    def flush(self) -> int | None:
        """Read the pending losses; returns the first step whose loss is NaN/inf (None if all are
        finite). Losses before that step count toward the mean; the bad one and later ones do not."""
        if not self.pending:
            return None
        values = torch.stack([loss.float() for _, loss, _ in self.pending]).tolist()
        steps = [(step, n) for step, _, n in self.pending]
        self.pending = []
        for (step, n), value in zip(steps, values):
            if not math.isfinite(value):
                return step
            self.total += value * n
            self.weight += n
            self.last = value
        return None

    @property
    def mean(self) -> float:
        return self.total / max(self.weight, 1)


def train_epoch(model, batches, task, optimizer, ctx, callbacks, autocast,
                sync_every: int | None = None, step=None) -> EpochStats:
    """One pass over `batches`. The losses stay on the device and are read every `sync_every` steps
    (`sync_interval`); a NaN/inf loss ends the epoch and reports the global step (1-based) it happened
    at, exactly (the steps after it in the same window have already updated the weights, which a
    diverged trial never uses). `on_step_end` gets the last loss read from the device. `step`: a whole
    training step in one call, `step(batch) -> (loss, n_targets, n_tokens)` with the update applied
    (embinit.train.graphed.GraphedStep); None: the eager step (`task.batch_loss`, backward, `optimizer`)."""
    model.train()
    every = sync_every or sync_interval(getattr(task, "device", torch.device("cpu")))
    meter, tokens = LossMeter(), 0
    start = time.perf_counter()
    for batch in batches:
        if step is not None:
            loss, n_targets, n_tokens = step(batch)   # forward, backward and update of the batch
        else:
            with autocast():
                loss, n_targets, n_tokens = task.batch_loss(model, batch)
        meter.add(ctx.step + 1, loss, n_targets)
        if len(meter.pending) >= every:
            bad = meter.flush()    # eager: before this step's update (with every=1 a bad step never updates)
            if bad is not None:
                return EpochStats(meter.mean, tokens, time.perf_counter() - start, bad)
        if step is None:
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        ctx.step += 1
        tokens += n_tokens
        fire(callbacks, "on_step_end", ctx, ctx.step, meter.last)
    bad = meter.flush()
    return EpochStats(meter.mean, tokens, time.perf_counter() - start, bad)


@torch.no_grad()
def mean_loss(model, batches, task, autocast) -> float:
    """Token-weighted mean loss over evaluation batches (dropout off), read from the device once."""
    model.eval()
    total, weight = None, 0
    for batch in batches:
        with autocast():
            loss, n_targets, _ = task.batch_loss(model, batch)
        part = loss.detach().double() * n_targets
        total = part if total is None else total + part
        weight += n_targets
    return float(total) / max(weight, 1) if total is not None else 0.0


def ppl(loss: float) -> float:
    return math.exp(loss) if loss < 700 else float("inf")
