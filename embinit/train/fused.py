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
- Only translation fuses today; other kinds, and members whose shapes or batch schedules differ, run
  one after the other through `run_trial` (the result says which mode ran).
- `ctx.model` of a member's callbacks holds the weights of the last epoch end, not of the current step.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from embinit.config import TrialConfig
from embinit.task_registry import KINDS, kind_entry
from embinit.train import checkpoint as ckpt
from embinit.train.callbacks import TrainContext, fire
from embinit.train.fused_group import FusedGroup, Lane
from embinit.train.loop import sync_interval
from embinit.train.oov_subset import oov_metrics
from embinit.train.result import TrialResult
from embinit.train.prepare import derive_seed, prepare
from embinit.train.trial import (
    BestTracker,
    _coverage,
    _info,
    emb_stats,
    make_optimizer,
    make_task,
    run_trial,
)

@dataclass(kw_only=True, eq=False)
class Member(Lane):
    """A lane with what the trial around the step needs: its config, task, checkpoints and tracking."""
    cfg: TrialConfig
    key: str
    s: Any                      # Setup
    task: Any
    out: Path | None
    tracker: BestTracker
    history: list = field(default_factory=list)
    init_stats: dict = field(default_factory=dict)
    best_state: dict | None = None
    start_epoch: int = 1
    stopped: bool = False
    elapsed: float = 0.0


def run_fused(cfgs: list[TrialConfig], out_dirs=None, callbacks=None, group_callbacks=(),
              resume: bool = True, cache_dir=None, sync_every: int | None = None) -> list[TrialResult]:
    """Train `cfgs` as one fused group; `out_dirs` and `callbacks` are per member (as `run_trial`'s),
    `group_callbacks` get `on_group_epoch_end(epoch)` after every member's epoch end. `sync_every`:
    steps between loss reads (default `sync_interval` of the device)."""
    t0 = time.perf_counter()
    n = len(cfgs)
    out_dirs = list(out_dirs) if out_dirs is not None else [None] * n
    callbacks = [list(c) for c in callbacks] if callbacks is not None else [[] for _ in range(n)]
    if cfgs and cfgs[0].threads:
        torch.set_num_threads(cfgs[0].threads)
    setups = [prepare(c, cache_dir) for c in cfgs]
    why = _not_fusable(setups)
    members = [_member(c, s, o, cb, resume) for c, s, o, cb in zip(cfgs, setups, out_dirs, callbacks)]
    active = [m for m in members if not m.stopped]
    if why is None and len({m.start_epoch for m in active}) > 1:
        why = "members resumed at different epochs"
    if why is not None:
        return [_separate(m, why, resume, cache_dir) for m in members]
    for m in members:
        fire(m.callbacks, "on_train_start", m.ctx)
    stats = _train(active, group_callbacks, t0, sync_every)
    group = {"mode": "fused", "group_size": n, "group_keys": [m.key for m in members], "padding": stats}
    return [_finish(m, group, t0) for m in members]


def _not_fusable(setups) -> str | None:
    """Why these setups cannot train as one fused model, or None."""
    first = setups[0]
    if not kind_entry(first.data.kind).fusable:
        fusable = [name for name, kind in KINDS.items() if kind.fusable]
        return f"{first.data.kind} does not fuse yet (only {fusable})"
    shape = {n: p.shape for n, p in first.model.named_parameters()}
    for s in setups[1:]:
        if s.model_cfg != first.model_cfg or {n: p.shape for n, p in s.model.named_parameters()} != shape:
            return "members differ in model shape"
        if (s.cfg.batch_size, s.cfg.max_tokens, s.cfg.epochs, s.cfg.precision, s.cfg.lr) != (
                first.cfg.batch_size, first.cfg.max_tokens, first.cfg.epochs, first.cfg.precision, first.cfg.lr):
            return "members differ in batch schedule, epochs, precision or learning rate"
        if s.device != first.device or s.data.kind != first.data.kind:
            return "members differ in device or task"
    if first.cfg.max_tokens:
        return "token-budget batches (max_tokens) give each data order its own number of steps"
    return None


def _member(cfg, s, out_dir, cbs, resume) -> Member:
    task = make_task(s)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    params = [p for p in s.model.parameters() if p.requires_grad]
    m = Member(model=s.model, generator=s.dropout_generator, optimizer=make_optimizer(params, s.cfg.lr),
               params=params, ctx=TrainContext(cfg=s.cfg, model=s.model, data=s.data, out_dir=out),
               callbacks=cbs, cfg=cfg, key=cfg.key(), s=s, task=task, out=out, tracker=BestTracker(task.tracked))
    m.init_stats = emb_stats(s.model, s.cfg, s.tables)
    last = ckpt.resume_state(out, m.key) if (out is not None and resume) else None
    if last is not None:
        s.model.load_state_dict(last["model"])
        m.optimizer.load_state_dict(last["optimizer"])
        ckpt.set_rng_state(last["rng"], s.dropout_generator)
        p = last["progress"]
        m.history, m.tracker = p["history"], BestTracker(task.tracked, p["best"])
        m.start_epoch, m.stopped, m.elapsed = p["epoch"] + 1, p["stopped"], p["elapsed"]
        m.ctx.step, m.init_stats = p["step"], p["emb_stats_init"]
    if m.start_epoch > s.cfg.epochs:
        m.stopped = True
    return m


def _separate(m: Member, why: str, resume, cache_dir) -> TrialResult:
    """The fallback: the member as an ordinary trial (it is prepared again, from the same seed)."""
    r = run_trial(m.cfg, out_dir=m.out, callbacks=m.callbacks, resume=resume, cache_dir=cache_dir)
    r.info["execution"] = {"mode": "separate", "fuse_refused": why}
    return r


def _train(active: list[Member], group_callbacks, t0, sync_every) -> dict:
    """Every epoch of the group; returns the padding it cost (token slots)."""
    pad = {"real_tokens": 0, "separate_slots": 0, "fused_slots": 0}
    if not active:
        return pad
    rc, task = active[0].s.cfg, active[0].task
    group = FusedGroup(active, rc.lr)
    every = sync_every or sync_interval(active[0].s.device)
    for epoch in range(active[0].start_epoch, rc.epochs + 1):
        start = time.perf_counter()
        group.train_epoch([_epoch_batches(m, epoch) for m in group.lanes], task.autocast, every, pad)
        seconds = time.perf_counter() - start
        if not group.lanes:
            break
        group.write_back()
        for m in group.lanes:
            _epoch_end(m, epoch, seconds, t0)
        group.drop([m for m in group.lanes if m.stopped])
        fire(group_callbacks, "on_group_epoch_end", epoch)
        if not group.lanes:
            break
    return pad


def _epoch_batches(m: Member, epoch: int) -> list[dict]:
    """The member's own data order for `epoch` (as run_trial draws it)."""
    m.ctx.epoch = epoch
    seed = m.s.cfg.seed if m.s.cfg.data_seed is None else m.s.cfg.data_seed
    batches = m.task.train_batches(torch.Generator().manual_seed(derive_seed(seed, f"data:{epoch}")))
    m.ctx.epoch_steps = len(batches)
    return batches


def _epoch_end(m: Member, epoch: int, seconds: float, t0: float) -> None:
    """Validate on the member's own module, keep its best checkpoint, write its last.pt (as run_trial)."""
    s, rc, model = m.s, m.s.cfg, m.s.model
    metrics = {"epoch": epoch, "train/loss": m.mean_loss, **m.task.validate(model),
               "tokens_per_s": m.tokens / max(seconds, 1e-9), "lr": rc.lr, "time_s": seconds}
    m.history.append(metrics)
    if m.tracker.update(metrics, epoch):
        if m.out is not None:
            vocabs = {side: (s.data.src_vocab if side == "src" else s.data.vocab).tokens for side in s.tables}
            ckpt.save_best(m.out, model, rc.to_dict(), vocabs, epoch)
        else:
            m.best_state = copy.deepcopy(model.state_dict())
    patience = rc.early_stopping_patience
    m.stopped = bool(patience and epoch - m.tracker.best_epoch >= patience)
    if m.out is not None:
        ckpt.save_last(m.out, m.key, model, m.optimizer, s.dropout_generator,
                       {"epoch": epoch, "step": m.ctx.step, "history": m.history, "best": m.tracker.state,
                        "stopped": m.stopped or epoch == rc.epochs, "emb_stats_init": m.init_stats,
                        "elapsed": m.elapsed + time.perf_counter() - t0})
    fire(m.callbacks, "on_epoch_end", m.ctx, epoch, metrics)


def _finish(m: Member, group: dict, t0: float) -> TrialResult:
    """The member's result, as `run_trial` builds it (test metrics of the best checkpoint)."""
    s, rc, model = m.s, m.s.cfg, m.s.model
    result = TrialResult(config=rc.to_dict(), key=m.key, status=m.status, diverged_step=m.diverged_step,
                         history=m.history, best_epoch=m.tracker.best_epoch, best=m.tracker.summary(),
                         emb_stats_init=m.init_stats, label=s.tables[next(reversed(s.tables))].label,
                         src_label=s.tables["src"].label if "src" in s.tables else None,
                         coverage=_coverage(s.tables), info=_info(s, m.params))
    result.info["execution"] = group
    if m.status == "finished" and m.tracker.best_epoch is not None:
        best_state = m.best_state
        if m.out is not None:
            result.checkpoint_path = str(m.out / ckpt.BEST)
            best_state = ckpt.load_best(m.out / ckpt.BEST)["model"]
        model.load_state_dict(best_state)
        result.test = {**m.task.test(model), **oov_metrics(m.task, model)}
        result.bleu_signature = result.test.pop("test/bleu_signature", None)
        result.emb_stats_best = emb_stats(model, rc)
    result.wall_time_s = m.elapsed + time.perf_counter() - t0
    fire(m.callbacks, "on_train_end", m.ctx, result)
    return result
