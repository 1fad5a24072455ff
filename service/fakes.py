"""In-process stand-ins for Ray and MLflow, for the service's tests and for trying the API without a
cluster. `FakeCluster` outlives app instances (like a real Ray cluster outlives an API restart); tests
move its experiments forward by hand. Nothing here trains anything."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from service.driver import DriverState
from service.runner import driver_name
from service.state import unrun_trial


@dataclass
class FakeCluster:
    drivers: dict[str, DriverState] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    released: set[str] = field(default_factory=set)
    # trial key -> state as MLflow would show it after the driver is gone
    mlflow: dict[str, str] = field(default_factory=dict)
    # MLflow experiments that exist in the pretend store; each node's total resources
    mlflow_experiments: set[str] = field(default_factory=set)
    nodes: list[dict[str, float]] = field(default_factory=lambda: [{"CPU": 4.0, "GPU": 0.0}])
    name: str = "fake"   # the cluster identity drivers are recorded with (`Runner.cluster_id()`)


class FakeRunner:
    """A `Runner` whose drivers are entries in a `FakeCluster`; `advance` plays the Ray side."""

    def __init__(self, cluster: FakeCluster | None = None, fail_start: bool = False):
        self.cluster = cluster or FakeCluster()
        self.fail_start = fail_start

    def describe(self) -> str:
        return "fake (in-process)"

    def cluster_id(self) -> str:
        return self.cluster.name

    def start(self, exp_id, spec, tracking_uri, trial_keys, store_uri=None) -> str:
        if self.fail_start:
            raise ConnectionError("no Ray cluster at fake://nowhere")
        name = driver_name(exp_id)
        self.cluster.drivers[name] = DriverState("queued", counts={"pending": len(trial_keys)})
        self.cluster.specs[name] = {"spec": spec, "keys": list(trial_keys), "store_uri": store_uri}
        return name

    def poll(self, driver):
        state = self.cluster.drivers.get(driver)
        return None if state is None else DriverState(**state.to_dict())

    def nodes(self) -> list[dict[str, float]]:
        return [dict(n) for n in self.cluster.nodes]

    def cancel(self, driver) -> None:
        self.cluster.cancelled.add(driver)
        state = self.cluster.drivers.get(driver)
        if state is not None and state.status in ("queued", "running"):
            # A real driver stops its trials and reports; the fake does it at once.
            state.status, state.finished_at = "cancelled", time.time()
            state.counts = {**state.counts, "pending": 0, "running": 0}

    def release(self, driver) -> None:
        self.cluster.released.add(driver)
        self.cluster.drivers.pop(driver, None)

    def advance(self, driver, status: str, error: str | None = None, **counts: int) -> None:
        state = self.cluster.drivers[driver]
        state.status, state.error = status, error
        state.counts = dict(counts) or state.counts
        state.started_at = state.started_at or time.time() - 10
        if status in ("succeeded", "failed", "cancelled"):
            state.finished_at = time.time()

    def lose(self, driver) -> None:
        """The driver's node died: the actor is gone without a word."""
        self.cluster.drivers.pop(driver, None)


class FakeStore:
    """A `ResultStore` answering from the `FakeCluster`'s pretend MLflow."""

    def __init__(self, cluster: FakeCluster, tracking_uri: str = "sqlite:///fake-mlflow.db"):
        self.cluster, self.tracking_uri = cluster, tracking_uri
        self.trial_store_uri = None   # the trials write through `tracking_uri`
        self.report_builds = 0
        self.prepared = 0

    def prepare(self) -> str:
        self.prepared += 1
        return "current"

    def counts(self, exp) -> dict[str, int]:
        out = {"pending": 0, "running": 0, "finished": 0, "failed": 0}
        for key in exp.trial_keys:
            status = self.cluster.mlflow.get(key, "pending")
            out[status if status in out else "pending"] += 1   # cancelled: to be run again, as the store says
        return out

    def close_orphans(self, exp, reason: str, status: str = "FAILED", tag: str | None = None) -> int:
        orphans = [k for k in exp.trial_keys if self.cluster.mlflow.get(k) == "running"]
        for key in orphans:
            self.cluster.mlflow[key] = tag or ("failed" if status == "FAILED" else "cancelled")
        return len(orphans)

    def has_experiment(self, name: str) -> bool:
        return name in self.cluster.mlflow_experiments

    def experiment_id(self, exp) -> str | None:
        return "7"

    def trials(self, exp) -> list[dict[str, Any]]:
        unrun, _ = unrun_trial(exp.status)   # as ResultStore.trials
        return [{"key": k, "status": self.cluster.mlflow.get(k, unrun), "config": {"key": k},
                 "metric": "test/bleu", "best_metric": 1.0 if self.cluster.mlflow.get(k) == "finished" else None,
                 "run_id": f"run-{k}" if k in self.cluster.mlflow else None} for k in exp.trial_keys]

    def report(self, exp, baseline: str | None = None) -> dict[str, str]:
        from embinit.report.baseline import UnknownBaseline
        from service.store import REPORT_VERSION
        if baseline not in (None, "Xavier"):
            raise UnknownBaseline(f"baseline {baseline!r} is not an init of this experiment; choose from ['Xavier']")
        self.report_builds += 1
        rows = [{"task": "synthetic_translation", "init": "Xavier", "n": 2, "mean": 1.0}]
        return {"version": REPORT_VERSION, "json": json.dumps({"experiment": exp.name, "rows": rows}),
                "markdown": ("| task | init | n | mean |\n|---|---|---|---|\n"
                             "| synthetic_translation | Xavier | 2 | 1.0 |\n"),
                "csv": "task,init,n,mean\nsynthetic_translation,Xavier,2,1.0\n",
                "latex": ("\\begin{tabular}{lc}\nInit & synthetic\\_translation \\\\\n"
                          "Xavier & 1.00 \\\\\n\\end{tabular}\n")}
