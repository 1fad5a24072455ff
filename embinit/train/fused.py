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
- A member whose loss is NaN/inf is `diverged` at that step and leaves the group before the optimizer
  step; the others redo the step (their dropout generators rewound) and go on. A member that stops
  early (patience) leaves the group at that epoch's end.
- Only translation fuses today; other kinds, and members whose shapes or batch schedules differ, run
  one after the other through `run_trial` (the result says which mode ran).
- `ctx.model` of a member's callbacks holds the weights of the last epoch end, not of the current step.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.models.fused import FusedEncoderDecoder
from embinit.train import checkpoint as ckpt
from embinit.train.callbacks import TrainContext, fire
from embinit.train.decoding import PAD_ID
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

FUSABLE_KINDS = ("translation",)


@dataclass
class Member:
    cfg: TrialConfig
    key: str
    s: Any                      # Setup
    task: Any
    out: Path | None
    callbacks: list
    optimizer: torch.optim.Optimizer   # holds the member's Adam state between fused epochs
    params: list
    ctx: TrainContext
    tracker: BestTracker
    history: list = field(default_factory=list)
    init_stats: dict = field(default_factory=dict)
    best_state: dict | None = None
    start_epoch: int = 1
    stopped: bool = False
    elapsed: float = 0.0
    status: str = "finished"
    diverged_step: int | None = None
    loss_sum: float = 0.0
    loss_weight: int = 0
    tokens: int = 0
    batches: list = field(default_factory=list)   # this epoch's training batches


def run_fused(cfgs: list[TrialConfig], out_dirs=None, callbacks=None, group_callbacks=(),
              resume: bool = True, cache_dir=None) -> list[TrialResult]:
    """Train `cfgs` as one fused group; `out_dirs` and `callbacks` are per member (as `run_trial`'s),
    `group_callbacks` get `on_group_epoch_end(epoch)` after every member's epoch end."""
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
    stats = _train(members, active, group_callbacks, t0)
    group = {"mode": "fused", "group_size": n, "group_keys": [m.key for m in members], "padding": stats}
    return [_finish(m, group, t0) for m in members]


def _not_fusable(setups) -> str | None:
    """Why these setups cannot train as one fused model, or None."""
    first = setups[0]
    if first.data.kind not in FUSABLE_KINDS:
        return f"{first.data.kind} does not fuse yet (only {list(FUSABLE_KINDS)})"
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
    m = Member(cfg, cfg.key(), s, task, out, cbs, make_optimizer(params, s.cfg.lr), params,
               TrainContext(cfg=s.cfg, model=s.model, data=s.data, out_dir=out), BestTracker(task.tracked))
    m.init_stats = emb_stats(s.model, s.cfg, s.tables)
    last = ckpt.load_last(out, m.key) if (out is not None and resume) else None
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


# the fused state: stacked weights and Adam moments of the active members -----------------------------
def _build(active: list[Member]):
    fused = FusedEncoderDecoder([m.s.model for m in active], [m.s.dropout_generator for m in active])
    fused.to(active[0].s.device)
    trainable = [p for p in fused.stacked() if p.requires_grad]
    opt = make_optimizer(trainable, active[0].s.cfg.lr)
    states = [[m.optimizer.state.get(p) for p in m.params] for m in active]
    for i, p in enumerate(trainable):
        per = [st[i] for st in states]
        if any(s is None or not s for s in per):
            continue  # a fresh start: no moments yet
        opt.state[p] = {"step": per[0]["step"].clone().to(p.device),
                        "exp_avg": torch.stack([s["exp_avg"] for s in per]).to(p.device),
                        "exp_avg_sq": torch.stack([s["exp_avg_sq"] for s in per]).to(p.device)}
    return fused, opt, trainable


def _write_back(fused, opt, trainable, active: list[Member]) -> None:
    """Stacked weights and Adam moments -> each active member's module and optimizer."""
    fused.write_back()
    for i, p in enumerate(trainable):
        st = opt.state.get(p)
        if not st:
            continue
        for g, m in enumerate(active):
            m.optimizer.state[m.params[i]] = {"step": st["step"].clone(), "exp_avg": st["exp_avg"][g].clone(),
                                              "exp_avg_sq": st["exp_avg_sq"][g].clone()}


def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    rows = max(t.shape[0] for t in tensors)
    cols = max(t.shape[1] for t in tensors)
    out = torch.full((len(tensors), rows, cols), PAD_ID, dtype=torch.long)
    for g, t in enumerate(tensors):
        out[g, :t.shape[0], :t.shape[1]] = t
    return out


def _train(members: list[Member], active: list[Member], group_callbacks, t0) -> dict:
    """Every epoch of the group; returns the padding it cost (token slots)."""
    pad = {"real_tokens": 0, "separate_slots": 0, "fused_slots": 0}
    if not active:
        return pad
    fused, opt, trainable = _build(active)
    rc = active[0].s.cfg
    for epoch in range(active[0].start_epoch, rc.epochs + 1):
        if not active:
            break
        start = time.perf_counter()
        for m in active:
            m.ctx.epoch = epoch
            seed = m.s.cfg.seed if m.s.cfg.data_seed is None else m.s.cfg.data_seed
            m.batches = m.task.train_batches(torch.Generator().manual_seed(derive_seed(seed, f"data:{epoch}")))
            m.ctx.epoch_steps = len(m.batches)
            m.loss_sum, m.loss_weight, m.tokens = 0.0, 0, 0
        if len({len(m.batches) for m in active}) > 1:
            raise EmbinitError("fused members got different numbers of batches in one epoch")
        fused.train()
        for step in range(len(active[0].batches)):
            batches = [m.batches[step] for m in active]
            fused, opt, trainable, active = _step(fused, opt, trainable, active, batches, pad)
            if not active:
                break
        seconds = time.perf_counter() - start
        if not active:
            break
        _write_back(fused, opt, trainable, active)
        for m in active:
            _epoch_end(m, epoch, seconds, t0)
        still = [m for m in active if not m.stopped]
        if len(still) != len(active) and still:
            fused, opt, trainable = _build(still)
        active = still
        fire(group_callbacks, "on_group_epoch_end", epoch)
    return pad


def _step(fused, opt, trainable, active, batches, pad):
    """One fused optimizer step; members whose loss is not finite leave the group first."""
    while True:
        src = _stack([b["src"] for b in batches])
        tgt_in, tgt_out = _stack([b["tgt_in"] for b in batches]), _stack([b["tgt_out"] for b in batches])
        dev = active[0].s.device
        gens = [m.s.dropout_generator.get_state() for m in active]
        with active[0].task.autocast():
            losses, counts = fused.losses(src.to(dev), tgt_in.to(dev), tgt_out.to(dev),
                                          [tuple(b["src"].shape) for b in batches],
                                          [tuple(b["tgt_in"].shape) for b in batches])
        values = losses.tolist()
        bad = [g for g, v in enumerate(values) if not math.isfinite(v)]
        if not bad:
            break
        _write_back(fused, opt, trainable, active)
        for g in bad:
            active[g].status, active[g].diverged_step = "diverged", active[g].ctx.step + 1
        keep = [g for g in range(len(active)) if g not in bad]
        for g in keep:
            active[g].s.dropout_generator.set_state(gens[g])
        active, batches = [active[g] for g in keep], [batches[g] for g in keep]
        if not active:
            return fused, opt, trainable, active
        fused, opt, trainable = _build(active)
        fused.train()
    opt.zero_grad(set_to_none=True)
    losses.sum().backward()
    opt.step()
    _count_padding(pad, batches, src, tgt_in)
    for m, b, v, c in zip(active, batches, values, counts.tolist()):
        m.ctx.step += 1
        m.loss_sum += v * c
        m.loss_weight += c
        m.tokens += int((b["src"] != PAD_ID).sum()) + int((b["tgt_in"] != PAD_ID).sum())
        fire(m.callbacks, "on_step_end", m.ctx, m.ctx.step, v)
    return fused, opt, trainable, active


def _count_padding(pad: dict, batches, src, tgt_in) -> None:
    pad["real_tokens"] += sum(int((b["src"] != PAD_ID).sum()) + int((b["tgt_in"] != PAD_ID).sum())
                              for b in batches)
    pad["separate_slots"] += sum(b["src"].numel() + b["tgt_in"].numel() for b in batches)
    pad["fused_slots"] += src.numel() + tgt_in.numel()


def _epoch_end(m: Member, epoch: int, seconds: float, t0: float) -> None:
    """Validate on the member's own module, keep its best checkpoint, write its last.pt (as run_trial)."""
    s, rc, model = m.s, m.s.cfg, m.s.model
    metrics = {"epoch": epoch, "train/loss": m.loss_sum / max(m.loss_weight, 1), **m.task.validate(model),
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
        result.test = m.task.test(model)
        result.bleu_signature = result.test.pop("test/bleu_signature", None)
        result.emb_stats_best = emb_stats(model, rc)
    result.wall_time_s = m.elapsed + time.perf_counter() - t0
    fire(m.callbacks, "on_train_end", m.ctx, result)
    return result
