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

import random
from typing import Any

from embinit.config import TASKS, TrialConfig

NOOP = "noop"


def tracked(task: str) -> list[tuple[str, str]]:
    """The validation metrics the real trainer tracks for `task` (the first is its criterion)."""
    d = TASKS[task]
    if d.kind == "translation":
        return [("val/loss", "min")]
    if d.kind == "lm":
        return [("val/ppl", "min")]
    base = d.metric.removesuffix("_matched")
    suffixes = ("_matched", "_mismatched") if d.metric.endswith("_matched") else ("",)
    return [(f"val/{base}{s}", "max") for s in suffixes]


def _epoch(kind: str, metric: str, rng: random.Random, epoch: int, suffixes: tuple[str, ...]) -> dict[str, Any]:
    """One epoch's made-up metrics, improving with the epoch, inside each metric's range."""
    progress = epoch / (epoch + 2)
    loss = 3.0 * (1 - progress) + rng.random() * 0.1
    out: dict[str, Any] = {"epoch": epoch, "train/loss": loss + 0.05}
    if kind == "translation":
        out.update({"val/loss": loss, "val/bleu": 100 * progress * rng.uniform(0.3, 0.6)})
    elif kind == "lm":
        out.update({"val/loss": loss, "val/ppl": 2.718 ** loss})
    else:
        for s in suffixes:
            out.update({f"val/loss{s}": loss, f"val/{metric}{s}": min(1.0, progress * rng.uniform(0.7, 1.0))})
    return {**out, "tokens_per_s": 0.0, "lr": 0.0, "time_s": 0.0}


def noop_result(cfg: TrialConfig, label: str) -> dict[str, Any]:
    """A finished `TrialResult` dict for `cfg`: `epochs` epochs of made-up metrics (seeded by the trial
    key), the best epoch of the task's criterion and, for translation and LMs, test metrics."""
    rc = cfg.resolved()
    d = TASKS[rc.task]
    rng = random.Random(cfg.key())
    suffixes = ("_matched", "_mismatched") if d.metric.endswith("_matched") else ("",)
    metric = d.metric.removesuffix("_matched")
    history = [_epoch(d.kind, metric, rng, e, suffixes) for e in range(1, rc.epochs + 1)]
    best: dict[str, Any] = {}
    for name, mode in tracked(rc.task):
        pick = (min if mode == "min" else max)(history, key=lambda h: h[name])
        best[name], best[f"{name}_epoch"] = pick[name], pick["epoch"]
    best_epoch = best[f"{tracked(rc.task)[0][0]}_epoch"]
    at_best = history[best_epoch - 1]
    test: dict[str, Any] = {}
    if d.kind == "translation":
        test = {"test/loss": at_best["val/loss"], "test/bleu": at_best["val/bleu"]}
    elif d.kind == "lm":
        test = {"test/loss": at_best["val/loss"], "test/ppl": at_best["val/ppl"]}
    return {"config": rc.to_dict(), "key": cfg.key(), "status": "finished", "diverged_step": None,
            "history": history, "best_epoch": best_epoch, "best": best, "test": test,
            "emb_stats_init": {}, "emb_stats_best": {}, "label": label, "src_label": None, "coverage": None,
            "bleu_signature": None, "wall_time_s": 0.0, "checkpoint_path": None,
            "info": {"execution": {"mode": NOOP}}}
