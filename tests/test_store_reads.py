"""How often a reader reads the whole experiment from the MLflow store: once per command, not once per
scientific point (resuming an Optuna search) or per sweep run (the reproduction's "How it was run"),
nor once per question a dry run asks (bench/bench_store_scale.py measures the time)."""

from __future__ import annotations

from collections import Counter
from contextlib import nullcontext

import pytest

from embinit import mlflow_store, run_table, run_writers
from embinit.config import TrialConfig
from embinit.spec import load_spec
from embinit.sweep.noop import noop_result
from embinit.sweep.work import work_item
from embinit.trial_run import TrialRun

pytestmark = pytest.mark.slow   # an MLflow store (SQLite), no Ray

SPACE = {"lr": [1.0e-3, 3.0e-3]}


def _optuna_spec(name: str, uri: str, inits: list[str]):
    return load_spec({"name": name, "tasks": ["synthetic_classification"], "inits": inits, "seeds": 2,
                      "mlflow": {"tracking_uri": uri},
                      "search": {"method": "optuna", "num_samples": 3, "space": SPACE}})


def _finish(uri: str, exp_id: str, parent: str, item, point: dict) -> None:
    """A finished trial run of `item` at the search `point`, as a sweep's worker writes one."""
    item = item.at_point(point)
    cfg = TrialConfig.from_dict(item.config)
    run = TrialRun.open(uri, exp_id, parent, cfg.to_dict(), cfg.key(), item.label, item.group())
    run.finish(noop_result(cfg, item.label), [])


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """Reads of many runs of an experiment (`run_table.rows` without a key: every run, or every run of
    a status), by caller module."""
    counted: Counter = Counter()
    rows = run_table.rows

    def counting(exp_id, uri, status=None, key=None):
        if key is None:
            counted[status or "all"] += 1
        return rows(exp_id, uri, status, key)
    monkeypatch.setattr(run_table, "rows", counting)
    return counted


@pytest.mark.parametrize("inits", [["xavier"], ["xavier", "normal", "xavier_normal"]])
def test_resuming_an_optuna_search_reads_the_finished_trials_once(tmp_path, monkeypatch, reads, inits):
    """Each scientific point gets the points MLflow has finished for all its seeds; the experiment's
    finished trials are read once whatever the number of points (one read per point before)."""
    from embinit.sweep import optuna_search
    from embinit.sweep import run as sweep_run
    uri = f"sqlite:///{tmp_path}/m.db"
    spec = _optuna_spec("resume-reads", uri, inits)
    exp_id = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp_id, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials())
    plan = spec.plan()
    for p in plan:   # every point: lr 1e-3 for both seeds; the first init also lr 3e-3, for seed 0 only
        _finish(uri, exp_id, parent, work_item(spec, p), {"lr": 1.0e-3})
        if p.label == "Xavier" and p.seed == 0:
            _finish(uri, exp_id, parent, work_item(spec, p), {"lr": 3.0e-3})
    searched = []
    monkeypatch.setattr(optuna_search, "RayRuntime", lambda address, resources=None: nullcontext())
    monkeypatch.setattr(optuna_search, "_search", lambda job, work: searched.append(work) or False)
    reads.clear()
    sweep_run.run_sweep(spec, progress=False)
    assert {label: points for _task, label, _items, points, _rewards in searched[0]} == {
        p.label: [{"lr": 1.0e-3}] for p in plan}
    # the same for 1 point as for 3: run_sweep's dedup reads the finished trials, the search once more;
    # closing what is left RUNNING and the final report read once each
    assert reads == {"FINISHED": 2, "RUNNING": 1, "all": 1}, reads
