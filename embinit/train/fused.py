"""`run_fused`: a group of same-shape trials trained as one fused model -> one `TrialResult` per trial.

Each member is set up exactly as `run_trial` sets it up (`prepare`: its own init tables, model weights,
dropout generator) and keeps its own data order, Adam state, best-epoch tracker, `last.pt`/`best.pt`,
callbacks and result. Only the training step is shared: the members' batches are padded to the
group's longest and one `FusedEncoderDecoder` computes every member's loss; the summed loss gives each
member's weights exactly its own gradient (no weight is shared), and Adam is elementwise, so a
member's update is its separate update up to float summation order.

- Validation, test, BLEU and checkpoints run on each member's own module (the stacked weights are
  copied back at every epoch end), so they are the separate trial's code, and `last.pt` has the
  separate format: a fused member can resume alone and the other way round.
- The step (`embinit.train.fused_group`) keeps the losses on the device and reads them every
  `sync_interval` steps, as the separate loop does. A member whose loss is NaN/inf is `diverged` at
  that exact step and leaves the group at the read; the others' steps are untouched by it and go on.
  A member that stops early (patience) leaves the group at that epoch's end.
- Every built-in kind fuses (translation, classification, LM: the kind's `fused` model and its Task's
  `fused_loss`). A kind without them, and members whose shapes or batch schedules differ, run one
  after the other through `run_trial` (the result says which mode ran).
- `ctx.model` of a member's callbacks holds the weights of the last epoch end, not of the current step,
  unless a callback asks for them at that step (`needs_weights`, embinit.train.callbacks: the KNN
  similarity analysis does); members fire their events in their callbacks' `step_order`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from embinit.config import TrialConfig
from embinit.task_registry import KINDS, kind_entry
from embinit.train.callbacks import fire, step_order
from embinit.train.fused_group import FusedGroup, Lane
from embinit.train.lifecycle import Member, epoch_batches, epoch_end, finish, start
from embinit.train.loop import sync_interval
from embinit.train.result import TrialResult
from embinit.train.prepare import prepare
from embinit.train.trial import run_trial


@dataclass(kw_only=True, eq=False)
class FusedMember(Lane, Member):
    """A member of a fused group: the step's lane (`fused_group.Lane`) and the trial's lifecycle state
    (`lifecycle.Member`)."""


def run_fused(cfgs: list[TrialConfig], out_dirs=None, callbacks=None, group_callbacks=(),
              resume: bool = True, cache_dir=None, sync_every: int | None = None) -> list[TrialResult]:
    """Train `cfgs` as one fused group; `out_dirs` and `callbacks` are per member (as `run_trial`'s),
    `group_callbacks` get `on_group_train_start(epoch)` after the members' `on_train_start` (`epoch`: the
    one the group resumes after, 0 when it starts afresh) and `on_group_epoch_end(epoch)` after every
    member's epoch end. `sync_every`:
    steps between loss reads (default `sync_interval` of the device)."""
    t0 = time.perf_counter()
    n = len(cfgs)
    out_dirs = list(out_dirs) if out_dirs is not None else [None] * n
    callbacks = [list(c) for c in callbacks] if callbacks is not None else [[] for _ in range(n)]
    if cfgs and cfgs[0].threads:
        torch.set_num_threads(cfgs[0].threads)
    setups = [prepare(c, cache_dir) for c in cfgs]
    why = _not_fusable(setups)
    members = [start(c, s, o, cb, resume, FusedMember) for c, s, o, cb in zip(cfgs, setups, out_dirs, callbacks)]
    active = [m for m in members if not m.stopped]
    if why is None and len({m.start_epoch for m in active}) > 1:
        why = "members resumed at different epochs"
    if why is not None:
        return [_separate(m, why, resume, cache_dir) for m in members]
    ordered = sorted(members, key=lambda m: step_order(m.callbacks))   # writers before readers
    for m in ordered:
        fire(m.callbacks, "on_train_start", m.ctx)
    fire(group_callbacks, "on_group_train_start", max(m.start_epoch for m in members) - 1)
    stats = _train(active, group_callbacks, t0, sync_every)
    group = {"mode": "fused", "group_size": n, "group_keys": [m.key for m in members], "padding": stats}
    results = {id(m): finish(m, group, t0) for m in ordered}
    return [results[id(m)] for m in members]


def _not_fusable(setups) -> str | None:
    """Why these setups cannot train as one fused model, or None."""
    first = setups[0]
    if not kind_entry(first.data.kind).fusable:
        fusable = [name for name, kind in KINDS.items() if kind.fusable]
        return f"{first.data.kind} does not fuse (only {fusable} do)"
    shape = {n: p.shape for n, p in first.model.named_parameters()}
    trains = {n: p.requires_grad for n, p in first.model.named_parameters()}
    for s in setups[1:]:
        rates = ("dropout", "attention_dropout", "activation_dropout")   # one rate a site for the whole group
        if any(getattr(s.model_cfg, r) != getattr(first.model_cfg, r) for r in rates):
            return "members differ in dropout (dropout, attention_dropout, activation_dropout)"
        if s.model_cfg != first.model_cfg or {n: p.shape for n, p in s.model.named_parameters()} != shape:
            return "members differ in model shape"
        if {n: p.requires_grad for n, p in s.model.named_parameters()} != trains:   # one flag per stacked weight
            return "members differ in which weights train (train_embeddings, freeze_non_embeddings)"
        if (s.cfg.batch_size, s.cfg.max_tokens, s.cfg.epochs, s.cfg.precision, s.cfg.lr) != (
                first.cfg.batch_size, first.cfg.max_tokens, first.cfg.epochs, first.cfg.precision, first.cfg.lr):
            return "members differ in batch schedule, epochs, precision or learning rate"
        if s.device != first.device or s.data.kind != first.data.kind:
            return "members differ in device or task"
    if first.cfg.cuda_graphs:
        return "cuda_graphs trials train alone (the fused step has no graphed form yet)"
    if first.cfg.max_tokens:
        return "token-budget batches (max_tokens) give each data order its own number of steps"
    return None


def _separate(m: FusedMember, why: str, resume, cache_dir) -> TrialResult:
    """The fallback: the member as an ordinary trial (it is prepared again, from the same seed)."""
    r = run_trial(m.cfg, out_dir=m.out, callbacks=m.callbacks, resume=resume, cache_dir=cache_dir)
    r.info["execution"] = {"mode": "separate", "fuse_refused": why}
    return r


def _train(active: list[FusedMember], group_callbacks, t0, sync_every) -> dict:
    """Every epoch of the group; returns the padding it cost (token slots)."""
    pad = {"real_tokens": 0, "separate_slots": 0, "fused_slots": 0}
    if not active:
        return pad
    rc, task = active[0].s.cfg, active[0].task
    group = FusedGroup(active, rc.lr, task)
    every = sync_every or sync_interval(active[0].s.device)
    for epoch in range(active[0].start_epoch, rc.epochs + 1):
        began = time.perf_counter()
        group.train_epoch([epoch_batches(m, epoch) for m in group.lanes], task.autocast, every, pad)
        seconds = time.perf_counter() - began
        if not group.lanes:
            break
        group.write_back()
        for m in group.lanes:
            epoch_end(m, epoch, m.mean_loss, m.tokens, seconds, t0)
        group.drop([m for m in group.lanes if m.stopped])
        fire(group_callbacks, "on_group_epoch_end", epoch)
        if not group.lanes:
            break
    return pad
