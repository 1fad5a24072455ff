"""The Ray Tune trainable: one Tune trial runs one embinit trial (an Optuna point: its seeds in turn), or
one fused group of same-shape trials (embinit.sweep.fused; when fusing, an Optuna point's seeds).

Inside the worker, per embinit trial: claim its key and its checkpoint folder (embinit.sweep.resume;
waiting while another sweep trains the key); skip it if MLflow already has a finished run of the key (a
concurrent or earlier sweep did it); open its MLflow child run (the run its folder names when an earlier
attempt or sweep left one to continue); run `run_trial` in the folder with a callback that logs each
epoch to MLflow and reports it to Tune (with the folder as the checkpoint where only Tune's copy
would reach a restarted attempt: embinit.sweep.resume). When the worker dies, Tune restarts the trial,
which finds the folder on its node (or the store's copy), else Tune's last reported checkpoint; when
the whole sweep died (the local Ray, the API), running the spec again finds the folder. Either way
`run_trial(resume=True)` continues after the last epoch, logging into the same MLflow run. With the
spec's `analyses`, the probe and similarity callbacks (embinit.sweep.analyses) log into the trial's run
as well. A trial without data advises as the sweep's caller gives a task its data (`SweepContext.advice`).
"""

from __future__ import annotations

import math
import traceback
from dataclasses import replace
from typing import Any, Callable, Sequence

from embinit.tracking import run_readers
from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.sweep import analyses, resume
from embinit.sweep.claims import ClaimLost
from embinit.sweep.fused import run_group
from embinit.sweep.noop import NOOP, noop_result
from embinit.sweep.reporting import TrialReporter, artifacts
from embinit.sweep.work import SweepContext, Unit, WorkItem
from embinit.tasks.hub import advising


def train_unit(config: dict[str, Any], shared: SweepContext, units: Sequence[Unit],
               extra_callbacks: Callable | None = None) -> None:
    """Tune function trainable. `config["unit"]` picks the unit; Optuna's searched values are the
    other keys of `config` and override the unit's configs."""
    from ray import tune
    unit = units[config["unit"]]
    overrides = {k: config[k] for k in shared.search_keys if k in config}
    objectives: list[float] = []
    reused = 0
    with resume.restored_checkpoint() as restored, advising(shared.advice):   # the caller's no-data advice
        items = [_at_point(item, overrides) for item in unit.trials]
        if unit.fused:  # one fused model for the group (embinit.sweep.fused)
            objectives, reused = run_group(tuple(items), shared, restored, extra_callbacks)
        for item in items if not unit.fused else ():
            with resume.claim(shared, item.key, restored) as claim:
                value, was_reused = _run_one(item, shared, claim, extra_callbacks)
            reused += was_reused
            if value is not None:
                objectives.append(value)
    final = {"objective": _mean(objectives), "embinit_done": 1, "embinit_trials": len(unit.trials),
             "embinit_failed": len(unit.trials) - len(objectives), "embinit_reused": reused}
    tune.report(final)


def _at_point(item: WorkItem, overrides: dict[str, Any]) -> WorkItem:
    """The item at an Optuna search point, keyed by its new config. The driver's key (the one its dedup
    and report look for) stays unless the point made a new config: keys count file inputs by content,
    and a worker may see files the driver does not."""
    at_point = item.at_point(overrides)
    return item if at_point is item else replace(at_point, key=TrialConfig.from_dict(at_point.config).key())


def _run_one(item: WorkItem, ctx: SweepContext, claim: resume.Claim,
             extra_callbacks) -> tuple[float | None, bool]:
    """Run (or reuse) one embinit trial in its claimed folder; returns its selection value (None when
    it failed) and whether another sweep's finished run was reused instead."""
    cfg = TrialConfig.from_dict(item.config)
    metric = item.metric
    key_runs = run_readers.key_records(ctx.experiment_id, ctx.runs_uri, claim.key)  # read once, for both
    done = resume.reused_value(ctx, claim, metric, key_runs)
    if done is not None:
        return done, not resume.finished_by_this_sweep(ctx, key_runs)
    run = resume.open_run(claim, ctx, cfg.to_dict(), item.label, item.group(), key_runs, item.name_task)
    try:
        return _train_in(run, item, cfg, ctx, claim, extra_callbacks), False
    except ClaimLost:  # another node trains the key now, in this run: leave the run to it
        raise
    except Exception:   # training, its outputs or its record (a full disk): the run says why, not Tune alone
        resume.fail_run(run, traceback.format_exc())
        raise  # Tune retries the trial (FailureConfig) from its last checkpoint


def _train_in(run, item: WorkItem, cfg: TrialConfig, ctx: SweepContext, claim: resume.Claim,
              extra_callbacks) -> float | None:
    """Train the trial into its open run and record the result; its selection value, None after a user
    error (recorded: it fails the same way on every retry)."""
    from embinit.train import run_trial  # torch; only workers import it
    metric, mode = item.selection
    out_dir = claim.path
    if ctx.trainer == NOOP:  # no training: every epoch's made-up metrics at once (embinit.sweep.noop)
        return _record(run, claim, noop_result(cfg, item.label), [], metric)
    callbacks = [TrialReporter(run, claim, metric, mode or "max", ctx.one_machine)]
    analysis_cbs = analyses.trial_callbacks(ctx.analyses, cfg, run.log_metrics, out_dir)
    run.note_similarity(analyses.run_tags(ctx.analyses, cfg))   # with the run's next write
    callbacks += analysis_cbs
    if extra_callbacks is not None:
        callbacks += list(extra_callbacks(cfg))
    try:
        result = run_trial(cfg, out_dir=out_dir, callbacks=callbacks, resume=True, cache_dir=ctx.cache_dir)
    except EmbinitError as e:  # a user error fails the same way on every retry: record it, go on
        claim.discard()
        run.fail(f"{type(e).__name__}: {e}", checkpoint=False)
        return None
    res = result.to_dict()
    run.note_tags(analyses.not_compared_tags(analysis_cbs))   # with the final batch
    files = artifacts(res, out_dir, ctx, item.run_name)
    if ctx.log_plots:
        files += analyses.plot_artifacts(analysis_cbs, res["history"], out_dir, item.run_name)
    return _record(run, claim, res, files, metric)


def _record(run, claim: resume.Claim, res: dict, files: list, metric: str) -> float:
    """Finish the trial's run with its result; returns its selection value."""
    run.finish(res, files)
    claim.discard()  # recorded: nothing left to resume
    value = (res.get("best") or {}).get(metric)
    return math.nan if value is None else value  # a diverged trial is a result, not a failure


def _mean(values: list[float]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan
