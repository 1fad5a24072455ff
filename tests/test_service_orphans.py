"""A lost driver's leftovers in a real MLflow store (the API with a fake Ray): the reconciler closes the
experiment's sweep run as well as its trial runs, as interrupted, as `embinit run` closes a lost driver's
(`records.INTERRUPTED`: the trials did not fail, so they never count as failed), and a trial run that kept
a checkpoint stays resumable (its error says that running the spec again resumes it). Another spec's sweep
in the same MLflow experiment is left alone."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from embinit.tracking import mlflow_store, records, run_readers, run_writers, trial_run
from service.fakes import FakeCluster, FakeRunner
from service.main import create_app
from service.settings import Settings
from service.store import ResultStore

pytestmark = pytest.mark.slow  # an MLflow SQLite store takes a few seconds to create

SPEC = {"name": "orphans", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 2}


def _api(tmp_path):
    """The API on a fake Ray and a real MLflow store in tmp_path: (the store's URI, the fake cluster, the app)."""
    (tmp_path / "data").mkdir()
    uri = mlflow_store.resolve_uri(f"sqlite:///{tmp_path}/m.db")
    cluster = FakeCluster()
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=uri,
                        data_roots=[tmp_path / "data"], pretrained_roots=[], refresh_interval_s=0.0,
                        check_cluster_resources=False, _env_file=None)
    return uri, cluster, create_app(settings, runner=FakeRunner(cluster), store=ResultStore(uri))


def test_a_lost_driver_s_sweep_run_is_closed_and_a_checkpointed_trial_stays_resumable(tmp_path):
    uri, cluster, app = _api(tmp_path)
    with TestClient(app) as client:
        sub = client.post("/experiments", json=SPEC)
        assert sub.status_code == 202, sub.text
        exp = sub.json()
        driver = f"embinit-exp-{exp['id']}"
        keys = cluster.specs[driver]["keys"]
        # What the driver had written when it died: its sweep run, one trial past a checkpointed epoch,
        # one that had not reached its first epoch; and another spec's sweep, alive, in the same experiment.
        exp_id = mlflow_store.ensure_experiment("orphans", uri)
        parent = run_writers.start_parent_run(exp_id, uri, exp["spec_hash"], "name: orphans\n", 2)
        other = run_writers.start_parent_run(exp_id, uri, "another-spec", "name: other\n", 1)
        config = {"task": "synthetic_translation", "init": "xavier", "seed": 0}
        kept = trial_run.TrialRun.open(uri, exp_id, parent, config, keys[0], "Xavier", {})
        kept.log_epoch(1, {"val/loss": 2.0}, checkpoint=True)
        fresh = trial_run.TrialRun.open(uri, exp_id, parent, {**config, "seed": 1}, keys[1], "Xavier", {})
        FakeRunner(cluster).lose(driver)  # the API and its local Ray were killed

        after = client.get(exp["status_url"]).json()
        assert after["status"] == "failed" and after["counts"]["running"] == 0

        # the two stopped trials did not fail: none counts as failed (they were `failed: 2` before)
        assert after["counts"]["failed"] == 0 and after["counts"]["cancelled"] == 2
        rows = {t["run_id"]: t["status"] for t in client.get(f"{exp['status_url']}/trials").json()["items"]}
        assert rows == {kept.run_id: "interrupted", fresh.run_id: "interrupted"}

    c = mlflow_store.client(uri)
    sweep = c.get_run(parent)
    # as `embinit run` closes a sweep whose driver it lost (embinit.sweep.guardian, close_dead_sweeps)
    assert (sweep.info.status, sweep.data.tags[records.STATUS_TAG]) == records.INTERRUPTED == ("KILLED", "interrupted")
    assert "Ray driver is gone" in sweep.data.tags[records.ERROR_TAG]
    assert c.get_run(other).info.status == "RUNNING"       # not this experiment's
    recs = {r.key: r for r in run_readers.trial_records(exp_id, uri)}
    assert recs[keys[0]].status == "interrupted" and recs[keys[0]].resume_epoch == 1
    assert "running the spec again resumes this run" in recs[keys[0]].error
    assert recs[keys[1]].status == "interrupted" and not recs[keys[1]].resumable
    assert records.by_key(recs.values())[keys[0]].run_id == kept.run_id
    assert fresh.run_id == recs[keys[1]].run_id


OPTUNA = {**SPEC, "name": "orphans-optuna", "tasks": ["synthetic_classification"],
          "search": {"method": "optuna", "num_samples": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}}}


def test_a_lost_optuna_search_closes_the_trials_it_drew_and_counts_them(tmp_path):
    """An Optuna search's trial keys are drawn at run time, none of its planned ones: its lost driver's
    running trials stayed RUNNING in MLflow (`/trials`: running, for ever), and its counts found no trial
    at all (every one pending, the finished ones too)."""
    from mlflow.entities import Metric

    uri, cluster, app = _api(tmp_path)
    with TestClient(app) as client:
        exp = client.post("/experiments", json=OPTUNA).json()
        exp_id = mlflow_store.ensure_experiment(OPTUNA["name"], uri)
        parent = run_writers.start_parent_run(exp_id, uri, exp["spec_hash"], "name: orphans-optuna\n", 4)
        other = run_writers.start_parent_run(exp_id, uri, "another-spec", "name: other\n", 1)
        config = {"task": "synthetic_classification", "init": "xavier", "seed": 0, "lr": 1e-3}
        done = trial_run.TrialRun.open(uri, exp_id, parent, config, "drawn-done", "Xavier", {})
        now = int(time.time() * 1000)
        mlflow_store.client(uri).log_batch(done.run_id, metrics=[Metric("best/val/acc", 0.5, now, 0)])
        mlflow_store.client(uri).set_tag(done.run_id, records.STATUS_TAG, "finished")
        mlflow_store.client(uri).set_terminated(done.run_id, "FINISHED")
        alive = trial_run.TrialRun.open(uri, exp_id, parent, {**config, "lr": 2e-3}, "drawn-alive", "Xavier", {})
        theirs = trial_run.TrialRun.open(uri, exp_id, other, {**config, "lr": 3e-3}, "theirs", "Xavier", {})
        FakeRunner(cluster).lose(f"embinit-exp-{exp['id']}")

        after = client.get(exp["status_url"]).json()
        assert after["status"] == "failed"
        # the closed run was interrupted, not failed (its driver died, not the trial); with the two draws
        # it never made: cancelled (a failed experiment starts nothing more)
        assert after["counts"] == {"pending": 0, "running": 0, "finished": 1, "failed": 0, "reused": 0,
                                   "cancelled": 3}
        rows = {t["run_id"]: t["status"] for t in client.get(f"{exp['status_url']}/trials").json()["items"]}
        assert rows[done.run_id] == "finished" and rows[alive.run_id] == "interrupted" and theirs.run_id not in rows
    c = mlflow_store.client(uri)
    assert c.get_run(alive.run_id).info.status == "KILLED"
    assert "Ray driver is gone" in c.get_run(alive.run_id).data.tags[records.ERROR_TAG]
    assert c.get_run(theirs.run_id).info.status == "RUNNING"   # another spec's trial: not this experiment's
