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
