"""Spec data for sweeps on local Ray with MLflow in a temporary SQLite store."""
from __future__ import annotations

from pathlib import Path


def sweep_spec_data(name: str, tmp: Path, task: dict, **over) -> dict:
    """A one-init, one-seed, no-retry spec over `task`, its cache and MLflow store under `tmp`."""
    data = {"name": name, "tasks": [task], "inits": ["xavier"], "seeds": [0], "resources": {"cpus": 1},
            "retries": 0, "cache_dir": str(tmp / "cache"), "mlflow": {"tracking_uri": f"sqlite:///{tmp}/m.db"}}
    data.update(over)
    return data
