"""The fused training step: G same-shape models of one task kind trained as one fused model (the kind's
`fused` entry: embinit.models.fused, embinit.models.fused_encoder), one optimizer step for all, without
waiting for the device between loss reads.

    lanes = [Lane(model=m, generator=g, optimizer=opt, params=ps, ctx=ctx) for ...]   # one per member
    group = FusedGroup(lanes, lr, task)     # task: the members' Task (its `fused_loss` stacks a step)
    diverged = group.train_epoch(batches_per_lane, autocast, every, pad)   # the lanes that diverged
    group.write_back()          # stacked weights and Adam moments -> each lane's module and optimizer

Per lane this is `loop.train_epoch` for that trial alone:
- the losses stay on the device, one [G] tensor per step, and are read in one transfer every `every`
  steps (`loop.sync_interval`: 1 on CPU, 25 on an accelerator) and at the epoch's end; sizes (target
  counts, token counts, the target positions in the padded batch) come from the host-side batches, so
  nothing else waits for the device (the padding mask is always built on an accelerator, as in
  `embedding.padding_mask`);
- a lane whose loss is NaN/inf is `diverged` at that exact step and leaves the group at the read. With a
  window, its steps after the bad one have already updated its weights, which a diverged trial never
  uses (as in the separate loop). The others are untouched by it: slice g of every stacked weight gets
  its gradient from member g's rows only (batched matmuls, per-row norms, attention rows, per-member
  losses) and Adam is elementwise, so their steps in the window are their separate steps, and at the
  read the step being taken goes on with the bad lanes' losses left out of the summed loss. No step is
  redone, so every dropout generator has drawn each step's masks exactly once, as when run alone;
- `on_step_end(ctx, step, loss)` gets the lane's last loss read (NaN before the epoch's first read);
  the lanes fire in their callbacks' `step_order`, and a lane whose callback `needs_weights(step)` gets
  its current weights copied into its module first (embinit.train.callbacks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from embinit.errors import EmbinitError
from embinit.task_registry import kind_code
from embinit.train.callbacks import fire, needs_weights, step_order
from embinit.train.lifecycle import Stepped, make_optimizer


@dataclass(kw_only=True, eq=False)
class Lane(Stepped):
    """One member as the step sees it (its own module, dropout generator, Adam and step counter in
    `ctx`), with this epoch's loss and token counts."""
    loss_sum: float = 0.0              # this epoch: token-weighted losses read so far
    loss_weight: int = 0
    last: float = math.nan             # the last loss read (what on_step_end sees)
    tokens: int = 0                    # this epoch: non-pad tokens of the steps taken

    def new_epoch(self) -> None:
        self.loss_sum, self.loss_weight, self.last, self.tokens = 0.0, 0, math.nan, 0

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / max(self.loss_weight, 1)


class FusedGroup:
    """The active lanes' weights and Adam moments stacked over a group dimension."""

    def __init__(self, lanes: list[Lane], lr: float, task):
        self.lanes, self.lr, self.task = list(lanes), lr, task
        self.fused_model = kind_code(task.kind, "fused")
        self.device = next(self.lanes[0].model.parameters()).device
        self._build()

    def _build(self) -> None:
        lanes = self.lanes
        self.model = self.fused_model([x.model for x in lanes], [x.generator for x in lanes]).to(self.device)
        self.trainable = [p for p in self.model.stacked() if p.requires_grad]
        self.opt = make_optimizer(self.trainable, self.lr)
        states = [[x.optimizer.state.get(p) for p in x.params] for x in lanes]
        for i, p in enumerate(self.trainable):
            per = [st[i] for st in states]
            if any(s is None or not s for s in per):
                continue  # a fresh start: no moments yet
            self.opt.state[p] = {"step": per[0]["step"].clone().to(p.device),
                                 "exp_avg": torch.stack([s["exp_avg"] for s in per]).to(p.device),
                                 "exp_avg_sq": torch.stack([s["exp_avg_sq"] for s in per]).to(p.device)}

    def write_back(self) -> None:
        """Stacked weights and Adam moments -> each lane's module and optimizer."""
        self.model.write_back()
        for i, p in enumerate(self.trainable):
            st = self.opt.state.get(p)
            if not st:
                continue
            for g, x in enumerate(self.lanes):
                x.optimizer.state[x.params[i]] = {"step": st["step"].clone(), "exp_avg": st["exp_avg"][g].clone(),
                                                  "exp_avg_sq": st["exp_avg_sq"][g].clone()}

    def drop(self, gone: list[Lane]) -> None:
        """`gone` leave the group (their weights written back first); the rest are stacked again."""
        if not gone:
            return
        self.write_back()
        self.lanes = [x for x in self.lanes if all(x is not y for y in gone)]
        if self.lanes:
            self._build()

    def train_epoch(self, batches: list[list[dict]], autocast, every: int, pad: dict | None = None) -> list[Lane]:
        """One pass; `batches[g]` is lane g's epoch (same length for all). Returns the lanes that diverged
        (they have left the group)."""
        if len({len(b) for b in batches}) > 1:
            raise EmbinitError("fused members got different numbers of batches in one epoch")
        own = {id(x): b for x, b in zip(self.lanes, batches)}
        for x in self.lanes:
            x.new_epoch()
        pending, gone = [], []
        self.model.train()
        for i in range(len(batches[0]) if batches else 0):
            if not self.lanes:
                break
            step = [own[id(x)][i] for x in self.lanes]
            losses = self._losses(step, autocast, pad)
            pending.append((losses.detach(), [b["n_targets"] for b in step], [x.ctx.step + 1 for x in self.lanes]))
            bad = self._read(pending) if len(pending) >= every else []   # before this step's update
            self._update(losses, step, bad)
            gone += bad
            self.drop(bad)
        bad = self._read(pending) if self.lanes else []
        self.drop(bad)
        return gone + bad

    def _losses(self, step: list[dict], autocast, pad) -> torch.Tensor:
        with autocast():
            losses, (separate, fused) = self.task.fused_loss(self.model, step)
        if pad is not None:
            pad["real_tokens"] += sum(b["n_tokens"] for b in step)
            pad["separate_slots"] += separate
            pad["fused_slots"] += fused
        return losses

    def _read(self, pending: list) -> list[Lane]:
        """The window's losses in one transfer. Each lane's finite losses before its first bad one count
        toward its epoch mean; a lane with a NaN/inf loss is marked diverged at that step (returned)."""
        if not pending:
            return []
        values = torch.stack([losses.float() for losses, _, _ in pending]).tolist()   # [window][G]
        bad = []
        for g, x in enumerate(self.lanes):
            for (_, counts, steps), row in zip(pending, values):
                if not math.isfinite(row[g]):
                    x.status, x.diverged_step = "diverged", steps[g]
                    bad.append(x)
                    break
                x.loss_sum += row[g] * counts[g]
                x.loss_weight += counts[g]
                x.last = row[g]
        pending.clear()
        return bad

    def _update(self, losses: torch.Tensor, step: list[dict], bad: list[Lane]) -> None:
        """The optimizer step of every lane not in `bad` (their losses are left out of the sum)."""
        keep = [g for g, x in enumerate(self.lanes) if all(x is not y for y in bad)]
        if not keep:
            return
        if len(keep) < len(self.lanes):
            losses = losses.index_select(0, torch.tensor(keep, device=losses.device))
        self.opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.opt.step()
        for g in sorted(keep, key=lambda g: step_order(self.lanes[g].callbacks)):
            x = self.lanes[g]
            x.ctx.step += 1
            x.tokens += step[g]["n_tokens"]
            if needs_weights(x.callbacks, x.ctx.step):
                self.model.write_back(only=g)   # this member's current weights, for its callback
            fire(x.callbacks, "on_step_end", x.ctx, x.ctx.step, x.last)

