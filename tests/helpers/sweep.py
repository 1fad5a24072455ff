"""Spec data for sweeps on local Ray with MLflow in a temporary SQLite store."""
from __future__ import annotations

from pathlib import Path


def sweep_spec_data(name: str, tmp: Path, task: dict, **over) -> dict:
    """A one-init, one-seed, no-retry spec over `task`, its cache and MLflow store under `tmp`."""
    data = {"name": name, "tasks": [task], "inits": ["xavier"], "seeds": [0], "resources": {"cpus": 1},
            "retries": 0, "cache_dir": str(tmp / "cache"), "mlflow": {"tracking_uri": f"sqlite:///{tmp}/m.db"}}
    data.update(over)
    return data


def before_tune_state_goes(monkeypatch, look):
    """What `look()` returns just before each Tune run's state is removed (embinit.sweep.tune_state),
    appended to the returned list as the sweep runs: for tests of what Tune wrote during a sweep."""
    from embinit.sweep import tune_state
    seen, discard = [], tune_state.discard

    def looked(results):
        seen.append(look())
        return discard(results)
    monkeypatch.setattr(tune_state, "discard", looked)
    return seen


def interrupted_after_epoch(uri: str, spec, epoch: int = 1):
    """A sweep of `spec` (one planned trial) Ctrl-C'd after its trial's epoch `epoch`, recorded as embinit
    records it: the trial's run interrupted, its checkpoint tag naming that epoch. Returns (experiment id,
    the planned trial, the trial's run)."""
    from embinit.sweep.interrupt import interrupted_reason
    from embinit.tracking import mlflow_store, run_writers, trial_run
    from embinit.tracking.records import CHECKPOINT_TAG, INTERRUPTED
    (planned,) = spec.plan()
    exp = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), 1, run_name=spec.name)
    run = trial_run.TrialRun.open(uri, exp, parent, planned.config, planned.key, planned.label,
                                  {"axes": {}, "point": {}})
    mlflow_store.client(uri).set_tag(run.run_id, CHECKPOINT_TAG, str(epoch))
    run_writers.close_orphans(exp, uri, parent, interrupted_reason("Ctrl-C"), *INTERRUPTED)
    return exp, planned, run
