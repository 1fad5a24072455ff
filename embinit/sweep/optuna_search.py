"""Optuna TPE search over nuisance hyperparameters, through Ray Tune's `OptunaSearch`.

One Tune run per scientific point (task x init x axes): each Tune trial is one search point and runs
the spec's seeds in turn, or when fusing (`execution.fuse`) as one fused group (each seed an embinit
trial with its own MLflow run and key either way); the objective is their mean selection metric.
Points that MLflow already has for every seed, as this search's own trials (the key it would train at the
point, which another spec's epochs, data or code change; the point inside its space), are given to the
sampler as evaluated (`points_to_evaluate` + `evaluated_rewards`) and count against the budget, so
resubmitting resumes the search rather than redrawing it; a re-suggested point trains nothing (its keys
are done).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from dataclasses import replace

from ray import tune

from embinit.config import TrialConfig
from embinit.tracking import run_readers
from embinit.tracking.records import TrialRecord
from embinit.spec import ExperimentSpec, PlannedTrial, Range
from embinit.sweep import tune_state
from embinit.sweep.fused import fuse_key
from embinit.sweep.interrupt import stop_on_interrupt
from embinit.sweep.job import TuneJob
from embinit.sweep.ray_runtime import RayRuntime
from embinit.sweep.tune_run import StopAll, make_trainable, progress_callback, quiet_tune_logs, run_config, \
    unique_name
from embinit.sweep.work import Unit, WorkItem, work_item


def domain(value: list | Range):
    if isinstance(value, list):
        return tune.choice(value)
    if value.type == "int":
        low, high = int(value.low), int(value.high) + 1  # Tune's int ranges exclude `high`
        return tune.lograndint(low, high) if value.log else tune.randint(low, high)
    return tune.loguniform(value.low, value.high) if value.log else tune.uniform(value.low, value.high)


def _groups(spec: ExperimentSpec, plan: tuple[PlannedTrial, ...]) -> dict[tuple, list[WorkItem]]:
    groups: dict[tuple, list[WorkItem]] = defaultdict(list)
    for p in plan:
        groups[(p.task, p.label, json.dumps(p.axes, sort_keys=True))].append(work_item(spec, p))
    return groups


def finished_by_setting(exp_id: str, uri: str) -> dict[tuple[str, str], list[TrialRecord]]:
    """The experiment's FINISHED trial records by (label, task), newest first: read once per search, not
    once per scientific point (each read is every finished trial of the experiment: with a read per
    point, resuming a search of G points over N finished trials read G x N records)."""
    out: dict[tuple[str, str], list[TrialRecord]] = defaultdict(list)
    for rec in run_readers.trial_records(exp_id, uri, status="FINISHED"):
        out[(rec.label, rec.task)].append(rec)
    return out


def in_space(spec: ExperimentSpec, point: dict) -> bool:
    """Whether `point` is one this spec's search could draw: the same hyperparameters, each value one of a
    list's or inside a range (an earlier spec's point outside a narrowed space is not part of this one)."""
    space = spec.search.space
    if set(point) != set(space):
        return False
    for k, v in point.items():
        dom = space[k]
        if isinstance(dom, list):
            if v not in dom:
                return False
        elif not isinstance(v, (int, float)) or not dom.low <= v <= dom.high:
            return False
    return True


def _evaluated(spec: ExperimentSpec, finished: dict[tuple[str, str], list[TrialRecord]],
               items: list[WorkItem]) -> tuple[list, list]:
    """Search points MLflow has finished for every seed of this group: (points, mean objectives);
    `finished`: the experiment's FINISHED trial records (`finished_by_setting`). A record counts only as
    the trial this search would train at its point (the same key: an earlier spec's trials with other
    epochs, data or code do not), at a point inside this spec's space."""
    label, task = items[0].label, items[0].config["task"]
    metric = items[0].metric
    by_seed = {item.config["seed"]: item for item in items}
    by_point: dict[str, dict[int, float]] = defaultdict(dict)
    for rec in finished.get((label, task), ()):
        item = by_seed.get(rec.seed)
        if item is None or rec.group.get("axes") != item.axes or not in_space(spec, rec.point):
            continue
        if TrialConfig.from_dict({**item.config, **rec.point}).key() != rec.key:
            continue
        by_point[json.dumps(rec.point, sort_keys=True)][rec.seed] = rec.metrics.get(f"best/{metric}", math.nan)
    seeds = set(spec.seeds)
    points, rewards = [], []
    for point, values in by_point.items():
        if seeds <= set(values):
            finite = [values[s] for s in seeds if math.isfinite(values[s])]
            points.append(json.loads(point))
            rewards.append(sum(finite) / len(finite) if finite else math.nan)
    return points, rewards


def _fuses(spec: ExperimentSpec, items: list[WorkItem]) -> bool:
    """With `fuse: always` (or `auto` on GPUs), a point's seeds train as one fused group when they fuse
    at all (a fusable kind, no token budget) and fit in `max_group`; a search point sets the same values
    for every seed."""
    if not spec.execution.fuses(spec.resources.gpus) or not 1 < len(items) <= spec.execution.max_group:
        return False
    keys = {fuse_key(item.config) for item in items}
    return len(keys) == 1 and None not in keys


def run_optuna(job: TuneJob) -> bool:
    """Run the search for each scientific point in turn; True when cancelled. Ray is started (or the
    cluster at `job.address` joined) only when some point still has budget left."""
    spec, shared, work = job.spec, job.shared, []
    finished = finished_by_setting(shared.experiment_id, shared.runs_uri)
    for (task, label, _axes), items in _groups(spec, job.plan).items():
        points, rewards = _evaluated(spec, finished, items)
        if spec.search.num_samples > len(points):
            work.append((task, label, items, points, rewards))
    if not work:
        return False
    with RayRuntime(job.address, spec.resources), stop_on_interrupt() as interrupted:  # Ctrl-C: stop, then raise
        stop = lambda: interrupted() or bool(job.should_stop())  # noqa: E731
        return _search(replace(job, should_stop=stop), work)


def _search(job: TuneJob, work: list[tuple]) -> bool:
    import optuna
    from ray.tune.search.optuna import OptunaSearch
    quiet_tune_logs()
    spec = job.spec
    shared = replace(job.shared, search_keys=tuple(spec.search.space))
    space = {k: domain(v) for k, v in spec.search.space.items()}
    stopper = StopAll(job.should_stop)
    for task, label, items, points, rewards in work:
        budget = spec.search.num_samples - len(points)
        mode = items[0].selection[1]
        known = [(p, r) for p, r in zip(points, rewards) if math.isfinite(r)]  # all-diverged: no reward
        searcher = OptunaSearch(metric="objective", mode=mode, sampler=optuna.samplers.TPESampler(seed=0),
                                points_to_evaluate=[p for p, _ in known] or None,
                                evaluated_rewards=[r for _, r in known] or None)
        units = [Unit(tuple(items), fused=_fuses(spec, items))]
        unique = unique_name(spec)
        tuner = tune.Tuner(
            make_trainable(spec, units, shared, job.extra_callbacks, unique),
            param_space={"unit": 0, **space},
            tune_config=tune.TuneConfig(search_alg=searcher, num_samples=budget, reuse_actors=True,
                                        max_concurrent_trials=spec.max_concurrent),
            run_config=run_config(spec, f"{spec.name}-{task}-{label}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  job.storage, progress_callback(job.progress, budget * len(items), 0, len(items)),
                                  stopper))
        tune_state.fit(tuner, unique)   # nothing reads Tune's state again (embinit.sweep.tune_state)
        if stopper.fired:
            return True
    return False
