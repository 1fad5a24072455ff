"""How often a reader reads the whole experiment from the MLflow store: once per command, not once per
scientific point (resuming an Optuna search) or per sweep run (the reproduction's "How it was run"),
nor once per question a dry run asks (bench/bench_store_scale.py measures the time)."""

from __future__ import annotations

from collections import Counter
from contextlib import nullcontext

import pytest

from embinit.tracking import mlflow_store, records, run_table, run_writers
from embinit.config import TrialConfig
from embinit.spec import load_spec
from embinit.sweep.noop import noop_result
from embinit.sweep.work import work_item
from embinit.tracking.trial_run import TrialRun

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


def _sweep_with_trials(uri: str, exp_id: str, n: int, device: str) -> None:
    parent = run_writers.start_parent_run(exp_id, uri, "f" * 16, "name: offline-multi30k-glove50\n", n)
    for seed in range(n):
        cfg = TrialConfig(task="synthetic_classification", seed=seed, epochs=1, lr=1e-3 * (1 + len(device)))
        run = TrialRun.open(uri, exp_id, parent, cfg.to_dict(), cfg.key(), "Xavier", {"axes": {}, "point": {}})
        mlflow_store.client(uri).set_tag(run.run_id, records.DEVICE_TAG, device)
        run.finish(noop_result(cfg, "Xavier"), [])
    run_writers.end_parent_run(parent, uri, "FINISHED", None, {})


@pytest.mark.parametrize("sweeps", [1, 3])
def test_the_reproduction_reads_an_experiments_trials_once_however_many_sweeps(tmp_path, reads, sweeps):
    """"How it was run" names each sweep's devices from one read of the experiment's trial runs (one
    read per sweep run before)."""
    from embinit.reproduction import Group, Inputs, Reproduction
    uri = f"sqlite:///{tmp_path}/m.db"
    exp_id = mlflow_store.ensure_experiment("offline-multi30k-glove50", uri)
    devices = ["cpu", "cuda:0 (NVIDIA H100)", "cpu"][:sweeps]
    for i, device in enumerate(devices):
        _sweep_with_trials(uri, exp_id, i + 1, device)
    rep = Reproduction(uri, Inputs(groups=(Group("offline-multi30k-glove50", "synthetic_classification", "Xavier",
                                                 "Xavier", "a.yaml"),), analogy_experiment="none"))
    reads.clear()
    (how,) = [s for s in rep.build() if s.title == "How it was run"]
    said = [ln.split("; devices: ")[1] for ln in how.lines if "; devices: " in ln]
    assert said == ["cpu (1 trial)", "cuda:0 (NVIDIA H100) (2 trials)", "cpu (3 trials)"][:sweeps]
    # (the group's trials were read when `rep` was made) every trial run once, for all its sweeps' devices
    assert reads == {"all": 1}, reads


def test_a_dry_run_reads_its_experiment_once(tmp_path, reads):
    """The keys it reuses, the unfinished runs it marks and the seconds per epoch it measured come from
    one read of the spec's experiment (three before); every other experiment's finished trials are read
    once, for the seconds per epoch."""
    from embinit.cli.dry_run import dry_run
    uri = f"sqlite:///{tmp_path}/m.db"
    spec = load_spec({"name": "dry-reads", "tasks": ["synthetic_classification"], "inits": ["xavier"],
                      "seeds": 3, "defaults": {"epochs": 2}, "mlflow": {"tracking_uri": uri}})
    exp_id = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp_id, uri, spec.spec_hash(), spec.to_yaml(), 3)
    plan = spec.plan()
    for p in plan[:2]:
        cfg = TrialConfig.from_dict(p.config)
        run = TrialRun.open(uri, exp_id, parent, cfg.to_dict(), p.key, p.label, {"axes": {}, "point": {}})
        run.finish({**noop_result(cfg, p.label), "wall_time_s": 6.0}, [])
    _sweep_with_trials(uri, mlflow_store.ensure_experiment("other", uri), 1, "cpu")
    reads.clear()
    text = dry_run(spec)
    assert text.count("[finished: reused]") == 2 and "2 of the 3 trials already finished" in text
    assert "estimate from the trials of this shape already in the store" in text   # 6 s / 2 epochs measured
    # its own experiment once; MLflow's Default and "other" once each, for their finished trials
    assert reads == {"all": 1, "FINISHED": 2}, reads
