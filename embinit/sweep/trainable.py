"""The Ray Tune trainable: one Tune trial runs one embinit trial (an Optuna point: its seeds in turn).

Inside the worker, per embinit trial: skip it if MLflow already has a finished run of its key (a
concurrent or earlier sweep did it); open its MLflow child run (the same run again after a restart);
run `run_trial` with a callback that logs each epoch to MLflow and reports it to Tune with the trial's
`out_dir` (holding `last.pt`) as the checkpoint. When the worker dies, Tune restarts the trial from the
last reported checkpoint: it is restored into `out_dir` and `run_trial(resume=True)` continues from its
last epoch, logging into the same MLflow run. With the spec's `analyses`, the probe and similarity
callbacks (embinit.sweep.analyses) log into the trial's run as well.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

from embinit import tracking
from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.sweep import analyses
from embinit.sweep.fused import run_group
from embinit.sweep.reporting import RUN_ID_FILE, TrialReporter, artifacts
from embinit.sweep.work import SweepContext, Unit, WorkItem


def train_unit(config: dict[str, Any], shared: SweepContext, units: list[Unit],
               extra_callbacks: Callable | None = None) -> None:
    """Tune function trainable. `config["unit"]` picks the unit; Optuna's searched values are the
    other keys of `config` and override the unit's configs."""
    from ray import tune
    unit = units[config["unit"]]
    overrides = {k: config[k] for k in shared.search_keys if k in config}
    root = Path(tempfile.mkdtemp(prefix="embinit-trial-"))
    restored = tune.get_checkpoint()
    if restored is not None:
        restored.to_directory(str(root))
    try:
        if unit.fused:  # one fused model for the group (embinit.sweep.fused)
            objectives = run_group(unit.trials, shared, root, extra_callbacks)
        else:
            objectives = []
            for item in unit.trials:
                value = _run_one(item.at_point(overrides), shared, root, extra_callbacks)
                if value is not None:
                    objectives.append(value)
        final = {"objective": _mean(objectives), "embinit_done": 1, "embinit_trials": len(unit.trials),
                 "embinit_failed": len(unit.trials) - len(objectives)}
        tune.report(final)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_one(item: WorkItem, ctx: SweepContext, root: Path, extra_callbacks) -> float | None:
    """Run (or reuse) one embinit trial; returns its selection value, None when it failed."""
    from embinit.train import run_trial  # torch; only workers import it
    cfg = TrialConfig.from_dict(item.config)
    uri, exp_id, key = ctx.tracking_uri, ctx.experiment_id, cfg.key()
    metric, mode = item.selection
    done = tracking.finished_run(exp_id, uri, key)
    if done is not None:  # another sweep finished it meanwhile: reuse, never train twice
        return done.data.metrics.get(f"best/{metric}", math.nan)
    out_dir = root / key
    out_dir.mkdir(parents=True, exist_ok=True)
    id_file = out_dir / RUN_ID_FILE
    run = tracking.TrialRun.open(uri, exp_id, ctx.parent_run_id, cfg.to_dict(), key, item.label,
                                 item.group(), run_id=id_file.read_text().strip() if id_file.exists() else None)
    id_file.write_text(run.run_id)
    callbacks = [TrialReporter(run, root, metric, mode or "max")]
    analysis_cbs = analyses.trial_callbacks(ctx.analyses, cfg, run.log_metrics, out_dir)
    callbacks += analysis_cbs
    if extra_callbacks is not None:
        callbacks += list(extra_callbacks(cfg))
    try:
        result = run_trial(cfg, out_dir=out_dir, callbacks=callbacks, resume=True, cache_dir=ctx.cache_dir)
    except EmbinitError as e:  # a user error fails the same way on every retry: record it, go on
        run.fail(f"{type(e).__name__}: {e}")
        return None
    except Exception:
        run.fail(traceback.format_exc())
        raise  # Tune retries the trial (FailureConfig) from its last checkpoint
    res = result.to_dict()
    files = artifacts(res, out_dir, ctx, item.label)
    if ctx.log_plots:
        files += analyses.plot_artifacts(analysis_cbs, res["history"], out_dir, item.label)
    run.finish(res, files)
    shutil.rmtree(out_dir, ignore_errors=True)  # recorded: later checkpoints of the unit need not carry it
    value = (res.get("best") or {}).get(metric)
    return math.nan if value is None else value  # a diverged trial is a result, not a failure


def _mean(values: list[float]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan
