"""The no-work trainer (`execution.trainer: noop`): a trial that trains nothing and records, at once, the
history of its configured epochs with made-up values under the task's real metric names, for measuring
the control plane (Tune scheduling, claims and dedup, MLflow writes, the report) without the cost of
training (bench/bench_control_plane.py).

Its trials keep their real trial keys and go through the real path (claim, dedup against MLflow,
`TrialRun.open`, `TrialRun.finish`: every epoch in one batch), so the report and the service read them
like trained ones. Their runs are tagged `embinit.execution = noop`: their numbers mean nothing, so give
such a spec an experiment of its own (its trial keys are the real trials' keys).
"""

from __future__ import annotations

import math
import random
from typing import Any

from embinit.comparison import higher_is_better
from embinit.config import TrialConfig, metric_range
from embinit.task_registry import curve_metric, loss_metric, reported_metrics
from embinit.task_registry import tracked_metrics as tracked

NOOP = "noop"


def _val_names(task: str) -> list[str]:
    """Every validation metric a trial of `task` logs per epoch: its validation loss (MNLI's per split),
    the tracked ones, the curve, and the validation twin of each reported test metric."""
    names = [loss_metric(task), *(n for n, _ in tracked(task)), curve_metric(task)]
    names += ["val/" + m.removeprefix("test/") for m in reported_metrics(task) if m.startswith("test/")]
    return list(dict.fromkeys(names))


def _made_up(name: str, progress: float) -> float:
    """A value of `name` inside its range that gets better as `progress` goes from 0 to 1."""
    lo, hi = metric_range(name)
    if math.isfinite(lo) and math.isfinite(hi):
        span = (hi - lo) * 0.6 * progress
        return lo + span if higher_is_better(name) else hi - span
    base = lo if math.isfinite(lo) else 0.0
    return base + (3.0 * (1 - progress) if not higher_is_better(name) else 3.0 * progress)


def _epoch(names: list[str], rng: random.Random, epoch: int) -> dict[str, Any]:
    """One epoch's made-up metrics, improving with the epoch, inside each metric's range."""
    progress = epoch / (epoch + 2)
    out: dict[str, Any] = {"epoch": epoch, "train/loss": _made_up("train/loss", progress) + 0.05}
    out.update({n: _made_up(n, progress * rng.uniform(0.7, 1.0)) for n in names})
    return {**out, "tokens_per_s": 0.0, "lr": 0.0, "time_s": 0.0}


def noop_result(cfg: TrialConfig, label: str) -> dict[str, Any]:
    """A finished `TrialResult` dict for `cfg`: `epochs` epochs of made-up metrics (seeded by the trial
    key), the best epoch of the task's criterion and the test metrics the task reports."""
    rc = cfg.resolved()
    rng = random.Random(cfg.key())
    names = _val_names(rc.task)
    history = [_epoch(names, rng, e) for e in range(1, rc.epochs + 1)]
    best: dict[str, Any] = {}
    for name, mode in tracked(rc.task):
        pick = (min if mode == "min" else max)(history, key=lambda h: h[name])
        best[name], best[f"{name}_epoch"] = pick[name], pick["epoch"]
    best_epoch = best[f"{tracked(rc.task)[0][0]}_epoch"]
    at_best = history[best_epoch - 1]
    test = {m: at_best["val/" + m.removeprefix("test/")] for m in reported_metrics(rc.task) if m.startswith("test/")}
    if test:
        test["test/loss"] = at_best[loss_metric(rc.task)]
    return {"config": rc.to_dict(), "key": cfg.key(), "status": "finished", "diverged_step": None,
            "history": history, "best_epoch": best_epoch, "best": best, "test": test,
            "emb_stats_init": {}, "emb_stats_best": {}, "label": label, "src_label": None, "coverage": None,
            "bleu_signature": None, "wall_time_s": 0.0, "checkpoint_path": None,
            "info": {"execution": {"mode": NOOP}}}
