"""Fused execution in a sweep (`execution: {fuse: always}`, or `auto` for GPU trials): trials that share
task, model shape and batch schedule go to one Ray trial as a group and train as one fused model
(embinit.train.fused).

Grouping key: the trial config without the fields that only set a member's own numbers (seed, data
seed, init specs, pretrained files, OOV rule, init_from), plus the embedding dimension each side's
init gives, so GloVe-50d and GloVe-300d trials never share a group. Groups hold at most `max_group`
trials, and never fewer groups are made than the Ray cluster runs side by side (`parallel_slots`): on
2 CPU slots, 8 same-shape trials are two groups of 4, not one of 8 on one core. Kinds that do not
fuse (their task-registry entry names no `fused` model) and token-budget batches (max_tokens: the
number of steps depends on the data order) stay one trial per Ray trial.

In the worker every member is its own MLflow child run under its own trial key, opened, logged and
closed as a separate trial's is, in its own claimed checkpoint folder (embinit.sweep.resume: a rerun
after a crash resumes each member from it, in its run); the spec's `analyses` log into it as into a
separate trial's (a member's KNN similarity is measured on its current weights, after its twin in the
group has written its snapshot of that step). The group reports to Tune once per epoch, with one
checkpoint holding every member's folder where a restarted attempt needs Tune's copy (resume.py).
Members that resume at different epochs (a crash between two members' checkpoints) train separately,
each from its own.
"""

from __future__ import annotations

import json
import math
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embinit.tracking import mlflow_store, run_readers
from embinit.config import TrialConfig
from embinit.task_registry import task_kind
from embinit.errors import EmbinitError
from embinit.sweep import analyses, resume
from embinit.sweep.claims import ClaimLost
from embinit.sweep.reporting import TrialReporter, artifacts, resumed_report
from embinit.sweep.work import SweepContext, Unit, WorkItem

MEMBER_FIELDS = ("seed", "data_seed", "emb_seed", "init", "src_init", "pretrained", "src_pretrained", "oov",
                 "init_from")


def fuse_key(config: dict[str, Any]) -> str | None:
    """The group a trial config fuses into, None when it runs alone."""
    if not task_kind(config["task"]).fusable or config.get("max_tokens") or config.get("cuda_graphs"):
        return None
    shared = {k: v for k, v in config.items() if k not in MEMBER_FIELDS}
    shared["dims"] = _dims(config)
    return json.dumps(shared, sort_keys=True, default=str)


def _dims(config: dict[str, Any]) -> list:
    """The embedding dimension each side's init implies: a random init's is the config's `d_model`
    (None when that is unset too: the task's default), so Xavier and GloVe-50d trials at d_model 50
    share a group."""
    from embinit.init import parse_init_spec, source_dim
    from embinit.model_dims import side_sources
    try:
        sides = side_sources(TrialConfig.from_dict(config)).values()
        dims = [source_dim(parse_init_spec(i), p) for i, p in sides]
    except Exception as e:
        return [f"unknown:{e}"]
    return [config.get("d_model") if d is None else d for d in dims]


CPU_NOTE = ("fuse: auto: these trials run on CPU (resources.gpus: 0), where fusing at best breaks even; "
            "they run separately (fuse: always fuses them)")


def fused_units(units: list[Unit], execution, slots: int | None) -> list[Unit]:
    """The units as the spec's `execution` groups them for `slots` (callers check `execution.fuses`)."""
    return group_units(units, execution.max_group, slots, pairs=execution.fuse == "always")


def group_units(units: list[Unit], max_group: int, slots: int | None = None, pairs: bool = False) -> list[Unit]:
    """Single-trial units -> fused groups (trials of one data order together, `_chunks`) and the units
    that stay alone. `slots`: how many Ray trials the cluster runs at once (`parallel_slots`); fusing
    never leaves a slot idle that a trial could use, so a group holds at most ceil(trials / slots)
    (and `max_group`) trials, and with a slot for every trial nothing fuses, unless `pairs` (`fuse:
    always`): then groups hold at least 2."""
    groups: dict[str, list[WorkItem]] = {}
    out: list[Unit] = []
    for unit in units:
        key = fuse_key(unit.trials[0].config) if len(unit.trials) == 1 else None
        if key is None:
            out.append(unit)
        else:
            groups.setdefault(key, []).append(unit.trials[0])
    total = sum(len(items) for items in groups.values())
    cap = max_group if not slots else min(max_group, math.ceil(total / slots))
    cap = max(cap, 2) if pairs else cap
    for items in groups.values():
        out += [Unit(tuple(chunk), fused=len(chunk) > 1) for chunk in _chunks(items, max(cap, 1))]
    return out


def _chunks(items: list[WorkItem], cap: int) -> list[list[WorkItem]]:
    """Groups of at most `cap` that keep trials of one data order together: their batches have the same
    shapes at every step, so the fused step pads nothing (members of different data orders pad each
    step to the longest of their batches: 1.6-2.2x the token slots on SST-2, docs/benchmarks.md).
    Each data order's trials (plan order) are cut into even pieces of at most `cap`, then the pieces
    are packed, largest first, into as few groups as fit."""
    runs: dict[int, list[WorkItem]] = {}
    for item in items:
        order = item.config.get("data_seed")
        runs.setdefault(item.config["seed"] if order is None else order, []).append(item)
    pieces = []
    for run in runs.values():
        k = math.ceil(len(run) / cap)
        pieces += [run[len(run) * p // k:len(run) * (p + 1) // k] for p in range(k)]
    groups: list[list[WorkItem]] = []
    for piece in sorted(pieces, key=len, reverse=True):   # stable: plan order among equal sizes
        home = next((g for g in groups if len(g) + len(piece) <= cap), None)
        if home is None:
            groups.append(list(piece))
        else:
            home.extend(piece)
    return groups


def parallel_slots(cpus: float, gpus: float, max_concurrent: int | None) -> int | None:
    """How many Ray trials of `cpus`/`gpus` each the connected Ray cluster runs at once now (an
    autoscaler may add nodes later), capped by the spec's `max_concurrent`; None when unknown."""
    import ray
    have = ray.cluster_resources()
    fits = [int(have.get(key, 0) // want) for key, want in (("CPU", cpus), ("GPU", gpus)) if want > 0]
    slots = min(fits) if fits else None
    if max_concurrent is not None:
        slots = min(slots, max_concurrent) if slots is not None else max_concurrent
    return max(slots, 1) if slots is not None else None


class MemberReporter(TrialReporter):
    """A member's epochs go to its own MLflow run; the group reports to Tune once (GroupReporter)."""

    last: float = math.nan   # the member's selection metric at its latest epoch
    reports_resume = False   # the group reports it (GroupReporter.on_group_train_start)

    def on_epoch_end(self, ctx, epoch: int, metrics: dict[str, Any]) -> None:
        self.claim.sync()
        self.run.log_epoch(epoch, metrics, checkpoint=self.claim.persistent)
        self.last = self.track({k: v for k, v in mlflow_store.flat_numbers(metrics).items() if math.isfinite(v)})


class GroupReporter:
    """The group's epoch to Tune: one checkpoint of every member's folder; `objective`, the members'
    mean selection metric at their latest epoch (what an Optuna search sees of a point while it runs);
    and for the progress table the planned epochs and the members' best so far."""

    def __init__(self, claims: list[resume.Claim], members: list[MemberReporter], epochs: int,
                 one_machine: bool = False):
        self.claims, self.members, self.epochs = claims, members, epochs
        self.one_machine = one_machine  # SweepContext.one_machine: whether Tune's copy is needed (resume.py)

    def on_group_train_start(self, epoch: int) -> None:
        """A group resumed after `epoch` (> 0) says so at once, with its members' best so far
        (embinit.sweep.reporting.resumed_report: no epoch ended, no checkpoint)."""
        if epoch > 0:
            from ray import tune
            best, objective = self._best_and_objective()
            tune.report(resumed_report(epoch, best, objective, self.epochs, embinit_trials=len(self.claims)))

    def on_group_epoch_end(self, epoch: int) -> None:
        from ray import tune
        best, objective = self._best_and_objective()
        with resume.tune_checkpoint(self.claims, self.one_machine) as checkpoint:
            tune.report({"embinit_epoch": epoch, "embinit_trials": len(self.claims), "embinit_epochs": self.epochs,
                         "embinit_best": best, "objective": objective}, checkpoint=checkpoint)

    def _best_and_objective(self) -> tuple[float, float]:
        """The members' best so far, and the mean of their latest selection metric."""
        finite = [m.last for m in self.members if math.isfinite(m.last)]
        bests = [m.best for m in self.members if math.isfinite(m.best)]
        best = (max(bests) if self.members[0].mode == "max" else min(bests)) if bests else math.nan
        return best, sum(finite) / len(finite) if finite else math.nan


def run_group(items: tuple[WorkItem, ...], ctx: SweepContext, restored: Path | None,
              extra_callbacks: Callable | None) -> tuple[list[float], int]:
    """Run (or reuse) a fused group's trials; returns the selection values of those that did not fail,
    and how many were reused (another sweep had finished them).
    `restored`: Tune's checkpoint of the group restored to disk (a restarted attempt), or None."""
    cfgs = [TrialConfig.from_dict(item.config) for item in items]
    with resume.claim_all(ctx, [item.key for item in items], restored) as claims:  # the driver's keys
        values, todo, reused = [], [], 0
        for cfg, item in zip(cfgs, items):
            key_runs = run_readers.key_records(ctx.experiment_id, ctx.runs_uri, item.key)  # once, for both
            done = resume.reused_value(ctx, claims[item.key], item.metric, key_runs)
            if done is not None:
                values.append(done)
                reused += not resume.finished_by_this_sweep(ctx, key_runs)   # a restarted group's own: done here
            else:
                todo.append((cfg, item, claims[item.key], key_runs))
        return (values + _train_group(todo, ctx, extra_callbacks) if todo else values), reused


def _train_group(todo: list[tuple], ctx: SweepContext, extra_callbacks: Callable | None) -> list[float]:
    from embinit.train.fused import run_fused
    runs, callbacks, analysis_cbs, reporters, values = [], [], [], [], []
    for cfg, item, claim, key_runs in todo:
        run = resume.open_run(claim, ctx, cfg.to_dict(), item.label, item.group(), key_runs, item.name_task)
        analysis_cbs.append(analyses.trial_callbacks(ctx.analyses, cfg, run.log_metrics, claim.path))
        run.note_similarity(analyses.run_tags(ctx.analyses, cfg))   # with the run's next write
        reporters.append(MemberReporter(run, claim, *item.selection))
        cbs = [reporters[-1], *analysis_cbs[-1]]
        cbs += list(extra_callbacks(cfg)) if extra_callbacks is not None else []
        runs.append(run)
        callbacks.append(cbs)
    claims = [claim for _, _, claim, _ in todo]
    group = GroupReporter(claims, reporters, max(cfg.resolved().epochs for cfg, *_ in todo), ctx.one_machine)
    try:
        results = run_fused([c for c, _, _, _ in todo], out_dirs=[c.path for c in claims], callbacks=callbacks,
                            group_callbacks=[group], resume=True, cache_dir=ctx.cache_dir)
    except EmbinitError as e:  # a user error fails the same way on every retry: record it, go on
        for run, claim in zip(runs, claims):
            claim.discard()
            run.fail(f"{type(e).__name__}: {e}", checkpoint=False)
        return values
    except ClaimLost:  # another node trains a member now, in its run: leave the runs to it
        raise
    except Exception:
        for run in runs:
            run.fail(traceback.format_exc())
        raise  # Tune retries the group from its last checkpoint
    try:
        for (_cfg, item, claim, _), run, result, own in zip(todo, runs, results, analysis_cbs):
            res = result.to_dict()
            run.note_tags(analyses.not_compared_tags(own))   # with the final batch
            files = artifacts(res, claim.path, ctx, item.run_name)
            if ctx.log_plots:
                files += analyses.plot_artifacts(own, res["history"], claim.path, item.run_name)
            run.finish(res, files)
            claim.discard()  # recorded: nothing left to resume
            value = (res.get("best") or {}).get(item.metric)
            values.append(math.nan if value is None else value)
    except Exception:   # their outputs or records (a full disk): the runs not recorded yet say why
        for run in runs[len(values):]:
            resume.fail_run(run, traceback.format_exc())
        raise
    return values
