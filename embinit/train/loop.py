"""The shared inner loops: one training epoch (with divergence detection) and a token-mean loss."""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from embinit.train.callbacks import fire


@dataclass
class EpochStats:
    loss: float                    # token-weighted mean training loss
    tokens: int                    # non-pad tokens fed to the model (source + target for translation)
    seconds: float
    diverged_step: int | None = None


def autocast_for(precision: str, device: torch.device):
    """A factory of autocast contexts: bf16 autocast, or nothing for fp32."""
    if precision == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext


def train_epoch(model, batches, task, optimizer, ctx, callbacks, autocast) -> EpochStats:
    """One pass over `batches`. A NaN/inf loss stops the epoch before the optimizer step and reports
    the global step (1-based) it happened at."""
    model.train()
    total, weight, tokens = 0.0, 0, 0
    start = time.perf_counter()
    for batch in batches:
        with autocast():
            loss, n_targets, n_tokens = task.batch_loss(model, batch)
        value = loss.item()
        if not math.isfinite(value):
            return EpochStats(total / max(weight, 1), tokens, time.perf_counter() - start, ctx.step + 1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        ctx.step += 1
        total += value * n_targets
        weight += n_targets
        tokens += n_tokens
        fire(callbacks, "on_step_end", ctx, ctx.step, value)
    return EpochStats(total / max(weight, 1), tokens, time.perf_counter() - start)


@torch.no_grad()
def mean_loss(model, batches, task, autocast) -> float:
    """Token-weighted mean loss over evaluation batches (dropout off)."""
    model.eval()
    total, weight = 0.0, 0
    for batch in batches:
        with autocast():
            loss, n_targets, _ = task.batch_loss(model, batch)
        total += loss.item() * n_targets
        weight += n_targets
    return total / max(weight, 1)


def ppl(loss: float) -> float:
    return math.exp(loss) if loss < 700 else float("inf")
