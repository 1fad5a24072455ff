"""Counts say who did the work (issue 20, item 11): a key another experiment trained (a shared key) is
`reused` in the experiment that waited for it, `finished` only in the one that trained it: in the sweep's
live progress, in the driver's final counts, and in the store's counts after the driver is gone."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from embinit.tracking import mlflow_store, records, run_writers, trial_run
from embinit.tracking.records import TrialRecord
from embinit.spec import load_spec
from embinit.sweep.progress import Progress
from service.db import Experiment, utcnow
from service.driver import final_counts
from service.store import ResultStore


def _rec(key: str, status: str, parent: str | None) -> TrialRecord:
    return TrialRecord(run_id=f"run-{key}", key=key, task="sst2", label="Xavier", status=status, parent_id=parent)


def test_trained_elsewhere_names_the_keys_another_sweep_finished():
    chosen = {"a": _rec("a", "finished", "mine"), "b": _rec("b", "finished", "theirs"),
              "c": _rec("c", "diverged", None), "d": _rec("d", "failed", "theirs"),
              "e": _rec("e", "running", "theirs")}
    assert records.trained_elsewhere(chosen, {"mine"}) == {"b", "c"}


def test_live_progress_counts_a_reused_key_as_reused():
    sink = []
    p = Progress(total=4, reused=1, per_unit=1, sink=sink.append)
    trial = SimpleNamespace(trial_id="t1", last_result={"embinit_trials": 1, "embinit_failed": 0,
                                                        "embinit_reused": 1})
    p.on_trial_start(0, [], trial)
    p.on_trial_complete(0, [], trial)
    assert sink[-1]["reused"] == 2 and sink[-1]["done"] == 2 and sink[-1]["pending"] == 2
    other = SimpleNamespace(trial_id="t2", last_result={"embinit_trials": 1, "embinit_failed": 0,
                                                        "embinit_reused": 0})
    p.on_trial_start(0, [], other)
    p.on_trial_complete(0, [], other)
    assert sink[-1]["reused"] == 2 and sink[-1]["done"] == 3  # trained here: done, not reused


def test_the_driver_s_final_counts_separate_shared_keys():
    result = SimpleNamespace(n_finished=4, reused=1, shared=2, n_failed=1)
    assert final_counts(result) == {"pending": 0, "running": 0, "finished": 1, "failed": 1, "reused": 3}


@pytest.mark.slow  # a real MLflow store
def test_after_the_drivers_are_gone_only_the_trainer_counts_a_shared_key_finished(tmp_path):
    uri = mlflow_store.resolve_uri(f"sqlite:///{tmp_path}/m.db")
    mlflow = {"experiment": "shared", "tracking_uri": uri}
    a = load_spec({"name": "spec-a", "tasks": ["sst2"], "inits": ["xavier"], "seeds": 1, "mlflow": mlflow})
    b = load_spec({"name": "spec-b", "tasks": ["sst2"], "inits": ["xavier", "normal"], "seeds": 1,
                   "mlflow": mlflow})
    shared_key = a.plan()[0].key
    assert shared_key in {p.key for p in b.plan()}
    exp_id = mlflow_store.ensure_experiment("shared", uri)
    since = utcnow() - dt.timedelta(seconds=1)
    exps = {s.name: Experiment(id=s.name, name=s.name, spec=s.canonical(), spec_hash=s.spec_hash(),
                               trial_keys=[p.key for p in s.plan()], n_trials=len(s.plan()), status="running",
                               counts={}, tracking_uri=uri, mlflow_experiment="shared", created_at=since,
                               updated_at=since) for s in (a, b)}
    sweeps = {s.name: run_writers.start_parent_run(exp_id, uri, s.spec_hash(), "x", 1) for s in (a, b)}
    for spec, key in (("spec-a", shared_key), ("spec-b", next(p.key for p in b.plan() if p.key != shared_key))):
        plan = {p.key: p for p in (a if spec == "spec-a" else b).plan()}
        run = trial_run.TrialRun.open(uri, exp_id, sweeps[spec], plan[key].config, key, plan[key].label, {})
        client = mlflow_store.client(uri)
        client.set_tag(run.run_id, records.STATUS_TAG, "finished")
        client.set_terminated(run.run_id, "FINISHED")
    store = ResultStore(uri)
    assert store.counts(exps["spec-a"]) == {"pending": 0, "running": 0, "finished": 1, "failed": 0, "reused": 0}
    assert store.counts(exps["spec-b"]) == {"pending": 0, "running": 0, "finished": 1, "failed": 0, "reused": 1}
    # An experiment submitted after the key was trained reuses every result.
    later = Experiment(**{**{c.name: getattr(exps["spec-a"], c.name) for c in Experiment.__table__.columns},
                          "created_at": utcnow() + dt.timedelta(minutes=5)})
    assert store.counts(later)["reused"] == 1 and store.counts(later)["finished"] == 0
