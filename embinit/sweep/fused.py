"""Fused execution in a sweep (`execution: {fuse: auto}`): trials that share task, model shape and
batch schedule go to one Ray trial as a group and train as one fused model (embinit.train.fused).

Grouping key: the trial config without the fields that only set a member's own numbers (seed, data
seed, init specs, pretrained files, OOV rule, init_from), plus the embedding dimension each side's
init gives, so GloVe-50d and GloVe-300d trials never share a group. Groups hold at most `max_group`
trials. Kinds that do not fuse (embinit.train.fused.FUSABLE_KINDS) and token-budget batches
(max_tokens: the number of steps depends on the data order) stay one trial per Ray trial.

In the worker every member is its own MLflow child run under its own trial key, opened, logged and
closed as a separate trial's is; the group reports to Tune once per epoch with one checkpoint folder
holding every member's `last.pt`.
"""

from __future__ import annotations

import json
import math
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embinit import tracking
from embinit.config import TrialConfig, task_defaults
from embinit.errors import EmbinitError
from embinit.sweep.reporting import RUN_ID_FILE, TrialReporter, artifacts
from embinit.sweep.work import SweepContext, Unit, WorkItem

MEMBER_FIELDS = ("seed", "data_seed", "init", "src_init", "pretrained", "src_pretrained", "oov", "init_from")


def fuse_key(config: dict[str, Any]) -> str | None:
    """The group a trial config fuses into, None when it runs alone."""
    from embinit.train.fused import FUSABLE_KINDS
    if task_defaults(config["task"]).kind not in FUSABLE_KINDS or config.get("max_tokens"):
        return None
    shared = {k: v for k, v in config.items() if k not in MEMBER_FIELDS}
    shared["dims"] = _dims(config)
    return json.dumps(shared, sort_keys=True, default=str)


def _dims(config: dict[str, Any]) -> list:
    """The embedding dimension each side's init implies (None: random, D comes from the config)."""
    from embinit.init import parse_init_spec, source_dim
    sides = [(config["init"], config.get("pretrained"))]
    if task_defaults(config["task"]).kind == "translation":
        sides.append((config.get("src_init") or config["init"],
                      config.get("src_pretrained") or config.get("pretrained")))
    try:
        return [source_dim(parse_init_spec(i), p) for i, p in sides]
    except Exception as e:
        return [f"unknown:{e}"]


def group_units(units: list[Unit], max_group: int) -> list[Unit]:
    """Single-trial units -> fused groups of up to `max_group` (in plan order) and the units that
    stay alone."""
    groups: dict[str, list[WorkItem]] = {}
    out: list[Unit] = []
    for unit in units:
        key = fuse_key(unit.trials[0].config) if len(unit.trials) == 1 else None
        if key is None:
            out.append(unit)
        else:
            groups.setdefault(key, []).append(unit.trials[0])
    for items in groups.values():
        for i in range(0, len(items), max_group):
            chunk = tuple(items[i:i + max_group])
            out.append(Unit(chunk, fused=len(chunk) > 1))
    return out


class MemberReporter(TrialReporter):
    """A member's epochs go to its own MLflow run; the group reports to Tune once (GroupReporter)."""

    def on_epoch_end(self, ctx, epoch: int, metrics: dict[str, Any]) -> None:
        self.run.log_epoch(epoch, metrics)


class GroupReporter:
    def __init__(self, ckpt_root: Path, size: int):
        self.ckpt_root, self.size = ckpt_root, size

    def on_group_epoch_end(self, epoch: int) -> None:
        from ray import tune
        from ray.tune import Checkpoint
        tune.report({"embinit_epoch": epoch, "embinit_trials": self.size},
                    checkpoint=Checkpoint.from_directory(str(self.ckpt_root)))


def run_group(items: tuple[WorkItem, ...], ctx: SweepContext, root: Path,
              extra_callbacks: Callable | None) -> list[float]:
    """Run (or reuse) a fused group's trials; returns the selection values of those that did not fail."""
    from embinit.train.fused import run_fused
    values, todo = [], []
    for item in items:
        cfg = TrialConfig.from_dict(item.config)
        done = tracking.finished_run(ctx.experiment_id, ctx.tracking_uri, cfg.key())
        if done is not None:  # another sweep finished it meanwhile: reuse, never train twice
            values.append(done.data.metrics.get(f"best/{item.metric}", math.nan))
        else:
            todo.append((cfg, item))
    if not todo:
        return values
    runs, dirs, callbacks = _open_members(todo, ctx, root, extra_callbacks)
    try:
        results = run_fused([c for c, _ in todo], out_dirs=dirs, callbacks=callbacks,
                            group_callbacks=[GroupReporter(root, len(todo))], resume=True,
                            cache_dir=ctx.cache_dir)
    except EmbinitError as e:  # a user error fails the same way on every retry: record it, go on
        for run in runs:
            run.fail(f"{type(e).__name__}: {e}")
        return values
    except Exception:
        for run in runs:
            run.fail(traceback.format_exc())
        raise  # Tune retries the group from its last checkpoint
    for (_cfg, item), run, out_dir, result in zip(todo, runs, dirs, results):
        res = result.to_dict()
        run.finish(res, artifacts(res, out_dir, ctx, item.label))
        value = (res.get("best") or {}).get(item.metric)
        values.append(math.nan if value is None else value)
    return values


def _open_members(todo: list[tuple[TrialConfig, WorkItem]], ctx: SweepContext, root: Path,
                  extra_callbacks: Callable | None) -> tuple[list, list[Path], list[list]]:
    """Each member's MLflow run (the same one again after a restart), out_dir and callbacks."""
    runs, dirs, callbacks = [], [], []
    for cfg, item in todo:
        out_dir = root / cfg.key()
        out_dir.mkdir(parents=True, exist_ok=True)
        id_file = out_dir / RUN_ID_FILE
        run = tracking.TrialRun.open(ctx.tracking_uri, ctx.experiment_id, ctx.parent_run_id, cfg.to_dict(),
                                     cfg.key(), item.label, item.group(),
                                     run_id=id_file.read_text().strip() if id_file.exists() else None)
        id_file.write_text(run.run_id)
        cbs = [MemberReporter(run, root, item.metric)]
        cbs += list(extra_callbacks(cfg)) if extra_callbacks is not None else []
        runs.append(run)
        dirs.append(out_dir)
        callbacks.append(cbs)
    return runs, dirs, callbacks
