"""Sweeps with a search (Optuna TPE through Ray Tune's OptunaSearch), cancellation, and the pre-flight
checks, on local Ray with MLflow in a temporary SQLite store (tiny synthetic tasks)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
import ray.cloudpickle

from embinit.tracking import mlflow_store, run_readers
from embinit.spec import SpecError, load_spec
from embinit.sweep import run_sweep
from helpers.sweep import sweep_spec_data

pytestmark = pytest.mark.slow
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

TINY = {"task": "synthetic_classification", "epochs": 1, "max_train_examples": 200, "d_model": 16,
        "ff_dim": 32, "heads": 2}


def spec(name, tmp, **over):
    return load_spec(sweep_spec_data(name, tmp, TINY, **over))


def test_optuna_search_runs_its_budget_and_resumes(ray_local, tmp_path):
    s = spec("opt", tmp_path, seeds=[0, 1], search={
        "method": "optuna", "num_samples": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}})
    result = run_sweep(s, progress=False)
    assert result.n_finished == 4 and result.n_failed == 0        # 2 points x 2 seeds
    trials = run_readers.list_trials("opt", result.tracking_uri)
    lrs = {t["config"]["lr"] for t in trials}
    assert len(lrs) == 2 and all(1e-4 <= lr <= 1e-2 for lr in lrs)
    for lr in lrs:                                                # each point ran every seed
        assert sorted(t["config"]["seed"] for t in trials if t["config"]["lr"] == lr) == [0, 1]
    (row,) = result.report.rows
    assert set(row["point"]) == {"lr"} and row["point"]["lr"] in lrs and row["n"] == 2

    again = run_sweep(s, progress=False)                          # the budget is spent: nothing trains
    assert len(run_readers.list_trials("opt", result.tracking_uri)) == 4
    assert again.report.rows[0]["point"] == row["point"]
    # the same points drawn again were reused: not 'trained meanwhile by another sweep' (shared)
    assert (again.reused, again.shared, again.n_finished) == (4, 0, 4)

    longer = spec("opt", tmp_path, seeds=[0, 1], tasks=[{**TINY, "epochs": 2}], search={
        "method": "optuna", "num_samples": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}})
    run_sweep(longer, progress=False)                             # another search: its own budget trains
    trials = run_readers.list_trials("opt", result.tracking_uri)
    assert sorted(t["config"]["epochs"] for t in trials) == [1] * 4 + [2] * 4


def test_an_optuna_point_s_seeds_train_as_one_fused_group(ray_local, tmp_path):
    """`fuse: auto` with Optuna: each point's two seeds are one fused group (both runs say so, each at
    the point's lr); the search spends its budget and the report picks its point as without fusing."""
    from embinit.tracking import records
    s = spec("opt-fused", tmp_path, seeds=[0, 1], execution={"fuse": "always"}, search={
        "method": "optuna", "num_samples": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}})
    result = run_sweep(s, progress=False)
    assert result.n_finished == 4 and result.n_failed == 0
    trials = run_readers.list_trials("opt-fused", result.tracking_uri)
    client = mlflow_store.client(result.tracking_uri)
    assert {client.get_run(t["run_id"]).data.tags[records.EXECUTION_TAG] for t in trials} == {"fused"}
    lrs = {t["config"]["lr"] for t in trials}
    assert len(lrs) == 2
    for lr in lrs:
        assert sorted(t["config"]["seed"] for t in trials if t["config"]["lr"] == lr) == [0, 1]
    (row,) = result.report.rows
    assert row["point"]["lr"] in lrs and row["n"] == 2
    again = run_sweep(s, progress=False)
    assert len(run_readers.list_trials("opt-fused", result.tracking_uri)) == 4
    assert again.report.rows[0]["point"] == row["point"]


class StopAfterFirstEpoch:
    def __init__(self, flag: str):
        self.flag = Path(flag)

    def on_epoch_end(self, ctx, epoch, metrics):
        self.flag.write_text("stop")
        import time
        time.sleep(30)   # still "running" when the driver sees the flag


def test_stop_cancels_running_trials(ray_local, tmp_path):
    s = spec("stop", tmp_path, inits=["xavier", "normal"], seeds=[0, 1], max_concurrent=1,
             tasks=[{**TINY, "epochs": 2}])
    flag, stop = tmp_path / "flag", threading.Event()

    def watch():  # the caller's side: e.g. the service's cancel endpoint sets the event
        while not flag.exists():
            time.sleep(0.2)
        stop.set()
    threading.Thread(target=watch, daemon=True).start()
    result = run_sweep(s, progress=True, stop=stop,
                       extra_callbacks=lambda cfg: [StopAfterFirstEpoch(str(flag))])
    assert result.cancelled
    statuses = [t["status"] for t in result.trials]
    assert statuses.count("cancelled") == 1 and "finished" not in statuses and "running" not in statuses
    assert len(statuses) == 1                                     # nothing else started
    # the sweep's report says what never finished and lists both inits (issue 22), also in MLflow
    done = result.report.completeness
    assert (done["planned"], done["unfinished"], done["unfinished_by_status"]) == (
        4, 4, {"cancelled": 1, "never started": 3})
    assert {x["init"] for x in done["inits_without_results"]} == {"Xavier", "Normal"}
    assert {(r["init"], r["n"]) for r in result.report.rows} == {("Xavier", 0), ("Normal", 0)}
    logged = mlflow_store.client(result.tracking_uri).download_artifacts(result.parent_run_id, "report.md",
                                                                         str(tmp_path))
    assert "**Incomplete: 4 of 4 planned trials never finished** (1 cancelled, 3 never started)." in Path(
        logged).read_text()


def test_missing_local_paths_fail_before_any_trial(tmp_path):
    s = spec("paths", tmp_path, inits=["glove"], pretrained={"glove": str(tmp_path / "nope.txt")})
    with pytest.raises(SpecError, match="nope.txt' does not exist"):
        run_sweep(s, progress=False)
