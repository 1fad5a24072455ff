"""One trial's life around its training steps, written once for both modes: `run_trial` (one member,
`embinit.train.trial`) and `run_fused` (N members sharing the step, `embinit.train.fused`).

    m = start(cfg, setup, out_dir, callbacks, resume)   # the Task, Adam, init statistics; maybe last.pt
    fire(m.callbacks, "on_train_start", m.ctx)
    for epoch ...:
        batches = epoch_batches(m, epoch)                 # the member's own data order for the epoch
        ... the step (loop.train_epoch, or the fused group's) ...
        epoch_end(m, epoch, train_loss, tokens, seconds, t0)   # validate, best.pt, patience, last.pt
    result = finish(m, execution, t0)                   # test metrics of the best checkpoint

The checkpoints (`last.pt`, `best.pt`) and the callbacks are this module's, so a member trained fused
and a trial trained alone write the same files, and either resumes the other's `last.pt`.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.task_registry import kind_code, task_kind
from embinit.train import checkpoint as ckpt
from embinit.train.callbacks import TrainContext, fire
from embinit.train.loop import autocast_for
from embinit.train.oov_subset import oov_metrics
from embinit.train.prepare import derive_seed, pe_table
from embinit.train.result import TrialResult


class BestTracker:
    """Best value and epoch of each tracked validation metric; the first one is the criterion."""

    def __init__(self, tracked: list[tuple[str, str]], state: dict | None = None, history: list[dict] = ()):
        """`state`: a resumed checkpoint's; a tracked metric it lacks (one tracked since the checkpoint
        was written) gets its best from the checkpoint's `history`, by the same rule."""
        self.tracked = tracked
        self.state = dict(state or {})  # name -> [value, epoch]
        for name, mode in tracked:
            if name not in self.state:
                for h in history:
                    if name in h:
                        self._record(name, mode, h[name], h["epoch"])

    def _record(self, name: str, mode: str, value: float, epoch: int) -> bool:
        old = self.state.get(name)
        # NaN never counts as better, not even as the first value (its epoch would be no best epoch)
        better = value == value and (old is None or (value < old[0] if mode == "min" else value > old[0]))
        if better:
            self.state[name] = [value, epoch]
        return better

    def update(self, metrics: dict, epoch: int) -> bool:
        """Record this epoch; True when the criterion (the first metric) improved."""
        improved = {name: self._record(name, mode, metrics[name], epoch) for name, mode in self.tracked}
        return improved[self.tracked[0][0]]

    @property
    def best_epoch(self) -> int | None:
        first = self.state.get(self.tracked[0][0])
        return first[1] if first else None

    def summary(self) -> dict:
        out = {}
        for name, _ in self.tracked:
            if name in self.state:
                out[name], out[f"{name}_epoch"] = self.state[name]
        return out


def make_optimizer(params, lr: float, capturable: bool = False) -> torch.optim.Optimizer:
    """Adam (0.9, 0.98, eps 1e-9) as in the paper. The fused kernel is ~6x faster than the default
    per-tensor loop on CPU (the dense embedding-table updates dominate it); same algorithm.
    `capturable`: its step counts on the device, so a CUDA graph can hold `step()` (embinit.train.graphed;
    PyTorch's fused Adam takes it too). The learning rate is a constant: nothing changes it between steps."""
    try:
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9, fused=True, capturable=capturable)
    except (RuntimeError, TypeError):  # a device or dtype without a fused kernel
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9, capturable=capturable)


def make_task(setup):
    """The kind's Task (the `Task` protocol, embinit.train.task) for a prepared trial."""
    ac = autocast_for(setup.cfg.precision, setup.device)
    return kind_code(setup.data.kind, "task").from_setup(setup, ac)


def emb_stats(model, cfg, tables=None) -> dict:
    """Statistics of the embedding tables as the model holds them: `emb/...` for the target (or only)
    table, `emb_src/...` for a translation model's source table. Coverage only at init."""
    from embinit.stats import embedding_stats

    out, pe = {}, pe_table(cfg)   # the table the trial's absorption targets were set against (prepare)
    for side, emb in model.embeddings().items():
        cov = tables[side].coverage if tables else None
        out.update(embedding_stats(emb.weight.detach().float().cpu(), pe_length=pe.positions,
                                   pe_base=pe.base, coverage=cov,
                                   prefix="emb_src/" if side == "src" else "emb/"))
    return out


@dataclass(kw_only=True, eq=False)
class Stepped:
    """What a training step needs of a trial: its module, dropout generator, Adam, context, callbacks;
    and how the steps ended (`status`, `diverged_step`). `fused_group.Lane` adds an epoch's loss counts."""
    model: torch.nn.Module
    generator: torch.Generator           # the dropout generator (`last.pt` keeps its state)
    optimizer: torch.optim.Optimizer
    params: list                         # the trainable parameters, in module order
    ctx: TrainContext
    callbacks: list = field(default_factory=list)
    status: str = "finished"
    diverged_step: int | None = None


@dataclass(kw_only=True, eq=False)
class Member(Stepped):
    """One trial's state between its steps: its setup, Task, checkpoints, tracker and history."""
    cfg: TrialConfig
    key: str
    s: Any                               # embinit.train.prepare.Setup
    task: Any                            # embinit.train.task.Task
    out: Path | None
    tracker: BestTracker
    history: list = field(default_factory=list)
    init_stats: dict = field(default_factory=dict)
    best_state: dict | None = None       # the best weights in memory when there is no out folder
    start_epoch: int = 1
    stopped: bool = False
    elapsed: float = 0.0                 # seconds of earlier runs of this trial (from last.pt)


def start(cfg: TrialConfig, s, out_dir, callbacks, resume: bool, member_type: type = Member) -> Member:
    """A member ready for its first epoch: resumed from its `last.pt` when one is there (and `resume`)."""
    task = make_task(s)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    params = [p for p in s.model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, s.cfg.lr, capturable=s.cfg.cuda_graphs)
    m = member_type(model=s.model, generator=s.dropout_generator, optimizer=optimizer,
                    params=params, ctx=TrainContext(cfg=s.cfg, model=s.model, data=s.data, out_dir=out),
                    callbacks=list(callbacks), cfg=cfg, key=cfg.key(), s=s, task=task, out=out,
                    tracker=BestTracker(task.tracked))
    m.init_stats = emb_stats(s.model, s.cfg, s.tables)
    last = ckpt.resume_state(out, m.key) if (out is not None and resume) else None
    if last is not None:
        s.model.load_state_dict(last["model"])
        m.optimizer.load_state_dict(last["optimizer"])
        ckpt.set_rng_state(last["rng"], s.dropout_generator)
        p = last["progress"]
        m.history, m.tracker = p["history"], BestTracker(task.tracked, p["best"], p["history"])
        m.start_epoch, m.stopped, m.elapsed = p["epoch"] + 1, p["stopped"], p["elapsed"]
        m.ctx.step, m.init_stats = p["step"], p["emb_stats_init"]
    m.ctx.history = m.history   # one list: on_train_start sees where a resumed trial stands, epoch_end appends
    if m.start_epoch > s.cfg.epochs:
        m.stopped = True
    return m


def epoch_batches(m: Member, epoch: int) -> list[dict]:
    """The member's own data order for `epoch` (seeded by its data seed and the epoch)."""
    m.ctx.epoch = epoch
    seed = m.s.cfg.seed if m.s.cfg.data_seed is None else m.s.cfg.data_seed
    batches = m.task.train_batches(torch.Generator().manual_seed(derive_seed(seed, f"data:{epoch}")))
    m.ctx.epoch_steps = len(batches)
    return batches


def epoch_end(m: Member, epoch: int, train_loss: float, tokens: int, seconds: float, t0: float) -> dict:
    """Validate, keep the best checkpoint, decide on early stopping, write `last.pt`, call
    `on_epoch_end`; returns the epoch's metrics."""
    s, rc, model = m.s, m.s.cfg, m.s.model
    metrics = {"epoch": epoch, "train/loss": train_loss, **m.task.validate(model),
               "tokens_per_s": tokens / max(seconds, 1e-9), "lr": rc.lr, "time_s": seconds}
    m.history.append(metrics)
    if m.tracker.update(metrics, epoch):
        if m.out is not None:
            vocabs = {side: (s.data.src_vocab if side == "src" else s.data.vocab).tokens for side in s.tables}
            ckpt.save_best(m.out, model, rc.to_dict(), vocabs, epoch)
        else:
            m.best_state = copy.deepcopy(model.state_dict())
    patience, best = rc.early_stopping_patience, m.tracker.best_epoch
    m.stopped = bool(patience and best is not None and epoch - best >= patience)
    if m.out is not None:
        ckpt.save_last(m.out, m.key, model, m.optimizer, s.dropout_generator,
                       {"epoch": epoch, "step": m.ctx.step, "history": m.history, "best": m.tracker.state,
                        "stopped": m.stopped or epoch == rc.epochs, "emb_stats_init": m.init_stats,
                        "elapsed": m.elapsed + time.perf_counter() - t0})
    fire(m.callbacks, "on_epoch_end", m.ctx, epoch, metrics)
    return metrics


def finish(m: Member, execution: dict, t0: float) -> TrialResult:
    """The trial's result: the test metrics and embedding statistics of its best checkpoint (none for a
    diverged trial), then `on_train_end`."""
    s, rc, model = m.s, m.s.cfg, m.s.model
    # `label` is the target (or only) side's init, named by side: the tables are built target first
    # (model_dims.side_sources), so their order would name a translation's source side.
    main_side = task_kind(rc.task).sides[-1]
    result = TrialResult(config=rc.to_dict(), key=m.key, status=m.status, diverged_step=m.diverged_step,
                         history=m.history, best_epoch=m.tracker.best_epoch, best=m.tracker.summary(),
                         emb_stats_init=m.init_stats, label=s.tables[main_side].label,
                         src_label=s.tables["src"].label if "src" in s.tables else None,
                         coverage=_coverage(s.tables), info=_info(s, m.params, execution))
    if m.status == "finished" and m.tracker.best_epoch is not None:
        best_state = m.best_state
        if m.out is not None:
            result.checkpoint_path = str(m.out / ckpt.BEST)
            best_state = _best_weights(m.out / ckpt.BEST, m.tracker.best_epoch)
        model.load_state_dict(best_state)
        result.test = {**m.task.test(model), **oov_metrics(m.task, model)}
        result.bleu_signature = result.test.pop("test/bleu_signature", None)
        if m.out is not None:   # the test outputs the metrics came from (logged by the sweep)
            ckpt.save_outputs(m.out, getattr(m.task, "test_outputs", dict)())
        result.emb_stats_best = emb_stats(model, rc)
    result.wall_time_s = m.elapsed + time.perf_counter() - t0
    fire(m.callbacks, "on_train_end", m.ctx, result)
    return result


def _best_weights(path: Path, best_epoch: int) -> dict:
    """best.pt's weights, which must be the best epoch's: an attempt cut off between writing best.pt and
    last.pt leaves a best.pt of an epoch the resumed history does not have (on a GPU the epoch's rerun
    need not be best again), and its test metrics would be another epoch's."""
    saved = ckpt.load_best(path)
    if saved.get("epoch") != best_epoch:
        raise EmbinitError(
            f"{path} holds the weights of epoch {saved.get('epoch')}, but the trial's best epoch is {best_epoch}: "
            "an earlier attempt was cut off between writing best.pt and last.pt, and the best epoch's weights "
            "are gone; its test metrics would be another epoch's, so none are given. Rerun the trial from "
            "scratch (remove its checkpoint folder)")
    return saved["model"]


def _coverage(tables) -> dict | None:
    cov = {side: t.coverage for side, t in tables.items() if t.coverage is not None}
    if not cov:
        return None
    return cov if len(tables) > 1 else next(iter(cov.values()))


def _info(s, params, execution: dict) -> dict:
    data_info = {k: v for k, v in (getattr(s.data, "info", None) or {}).items()
                 if isinstance(v, (int, float, str, bool, type(None))) or k == "label_names"}   # outputs' order
    return {"parameters": sum(p.numel() for p in s.model.parameters()),
            "trainable_parameters": sum(p.numel() for p in params),
            "d_model": s.model_cfg.d_model, "heads": s.model_cfg.heads, "device": str(s.device),
            "threads": torch.get_num_threads(), "data": data_info, "execution": execution,
            "split_sizes": {k: len(v) for k, v in s.data.splits.items()}}
