"""Trials on nodes that share no disk, only an object store (embinit.storage, a real S3 server here):
a trial lost on one node resumes on another from the store's copy of its folder, in the same MLflow run;
two sweeps on two nodes sharing a key train it once (the claim is a lease in the store, no flock); and
Ray Tune keeps its storage in the store.

Two nodes are two cache folders (`EMBINIT_CACHE_DIR`, or the specs' `cache_dir`): the one the first
attempt wrote is removed before the rerun, as a node dies with its disk. The trainable runs without Ray as
in tests/test_sweep_resume.py, whose helpers these tests share; the last test runs a real sweep."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from embinit.tracking import mlflow_store, records, run_writers
from embinit.storage import Store, configured
from embinit.sweep import resume
from embinit.sweep.claims import TTL_ENV, ClaimLost
from embinit.sweep.trainable import train_unit
from embinit.sweep.work import SweepContext
from embinit.trusted import TRUSTED_ROOTS_ENV
from helpers.s3 import objects, use_store
from test_sweep_resume import (TINY, Killed, KillAfter, Record, assert_resumed_in_one_run, attempt, setup, steps,
                               trial_runs, two_specs_share_a_key, units_of)
from test_sweep_resume import no_tune, tune_session  # noqa: F401 (fixtures: Tune's session calls stood in for)

pytestmark = pytest.mark.slow  # tiny trainings, MLflow SQLite stores, an S3 server in a thread


@pytest.fixture
def store_uri(endpoint, monkeypatch) -> str:
    monkeypatch.setenv(TTL_ENV, "2")  # a lost holder's lease lapses after 2 s
    return use_store(monkeypatch, endpoint)


def sweep(spec, units, callbacks) -> tuple[SweepContext, str]:
    """One sweep of `spec`'s units as a driver runs them, with the configured store."""
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    exp_id = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp_id, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials())
    shared = SweepContext(uri, exp_id, parent, log_checkpoint=False, log_plots=False, cache_dir=spec.cache_dir,
                          storage=configured())
    for i in range(len(units)):
        try:
            train_unit({"unit": i}, shared, units, extra_callbacks=lambda cfg: callbacks)
        except Killed:
            return shared, "killed"
    return shared, "done"


@pytest.mark.usefixtures("no_tune")
def test_a_trial_lost_with_its_node_resumes_on_another_from_the_store(tmp_path, monkeypatch, store_uri):
    spec = setup(tmp_path, "moved", cache_dir=None)
    units = units_of(spec)
    (key,) = [u.trials[0].key for u in units]
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "node-a"))
    first, outcome = sweep(spec, units, [KillAfter(2)])
    assert outcome == "killed"
    folder = resume.experiment_folder(first).name
    assert f"checkpoints/{folder}/{key}/last.pt" in objects(store_uri)
    # The node died with its disk, and with its lease: one that nobody renews (not released)
    shutil.rmtree(tmp_path / "node-a")
    store = Store.from_uri(store_uri)
    store.client().put_object(Bucket=store.bucket, Key=store.key("claims", folder, f"{key}.lease"),
                              Body=json.dumps({"holder": "node-a:1"}).encode(), Metadata={"holder": "node-a:1"})
    run_writers.close_orphans(first.experiment_id, first.tracking_uri, first.parent_run_id,
                           "the experiment's Ray driver is gone")

    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "node-b"))
    log: list = []
    second, outcome = sweep(spec, units, [Record(log)])
    assert outcome == "done"
    (start,) = [e for e in log if e[0] == "start"]
    assert start[2] > 0                                      # epoch 2's optimizer steps, from the store
    assert [e[2] for e in log if e[0] == "epoch"] == [3, 4]
    assert_resumed_in_one_run(second, first.parent_run_id, {key}, 2)   # the same run, each epoch once
    assert objects(store_uri) == []                          # recorded: the copy and the lease are gone


def test_a_retry_on_another_node_without_a_tune_checkpoint_resumes_from_the_store(tmp_path, monkeypatch, store_uri,
                                                                                    request):
    """With a store the epochs' reports carry no checkpoint, even on a Ray that may span machines: Tune
    restarts the attempt lost with its node with `tune.get_checkpoint()` None, and on another node it
    resumes from the store's copy after its last epoch, in the same run."""
    reports = request.getfixturevalue("tune_session")
    spec = setup(tmp_path, "retried", cache_dir=None)
    units = units_of(spec)
    (key,) = [u.trials[0].key for u in units]
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "node-a"))
    shared, _ = sweep(spec, [], [])          # the sweep: its parent run, its shared settings (one_machine False)
    assert attempt(shared, units, lambda cfg: [KillAfter(2)]) == "killed"
    assert reports and all(files is None for _, files in reports)   # Tune holds no copy
    shutil.rmtree(tmp_path / "node-a")       # the node died with its disk (its lease was released)
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "node-b"))
    log: list = []
    assert attempt(shared, units, lambda cfg: [Record(log)]) == "done"       # Tune's retry, on node b
    (start,) = [e for e in log if e[0] == "start"]
    assert start[2] > 0 and [e[2] for e in log if e[0] == "epoch"] == [3, 4]
    (run,) = trial_runs(shared)
    assert run.info.status == "FINISHED" and run.data.tags[records.KEY_TAG] == key
    assert steps(shared.tracking_uri, run.info.run_id, "val/loss") == [1, 2, 3, 4]


@pytest.mark.usefixtures("no_tune")
def test_two_sweeps_on_two_nodes_sharing_a_key_train_it_once(tmp_path, store_uri):
    two_specs_share_a_key(tmp_path, sweep, {"cache_dir": str(tmp_path / "a")}, {"cache_dir": str(tmp_path / "b")})
    assert objects(store_uri) == []


class StealAfter:
    """Another node takes the key's lease over at the end of `epoch` (this holder seemed silent)."""

    def __init__(self, epoch: int, uri: str):
        self.epoch, self.store = epoch, Store.from_uri(uri)

    def on_epoch_end(self, ctx, epoch, metrics):
        if epoch == self.epoch:
            (lease,) = [k for k in objects(self.store.uri) if k.startswith("claims/")]
            self.store.client().put_object(Bucket=self.store.bucket, Key=self.store.key(lease), Body=b"{}",
                                           Metadata={"holder": "node-b:1"})


@pytest.mark.usefixtures("no_tune")
def test_a_holder_whose_claim_was_taken_over_stops_and_leaves_the_run_alone(tmp_path, store_uri):
    spec = setup(tmp_path, "stolen")
    units = units_of(spec)
    with pytest.raises(ClaimLost, match="taken over"):
        sweep(spec, units, [StealAfter(1, store_uri)])
    (run,) = trial_runs_of(spec)
    assert run.info.status == "RUNNING" and records.ERROR_TAG not in run.data.tags   # not failed: node b's now
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    assert [m.step for m in mlflow_store.client(uri).get_metric_history(run.info.run_id, "val/loss")] == [1]
    (info,) = [k for k in objects(store_uri) if k.endswith("last.json")]
    store = Store.from_uri(store_uri)
    body = store.client().get_object(Bucket=store.bucket, Key=store.key(info))["Body"].read()
    assert json.loads(body)["epoch"] == 1                        # epoch 2 was not written over node b's copy
    assert any(k.startswith("claims/") for k in objects(store_uri))   # node b's lease is left alone


@pytest.mark.usefixtures("no_tune")
def test_outside_the_trusted_roots_nothing_goes_to_the_store(tmp_path, monkeypatch, store_uri):
    monkeypatch.setenv(TRUSTED_ROOTS_ENV, str(tmp_path / "elsewhere"))
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "default-cache"))
    spec = setup(tmp_path, "untrusted")                      # its cache_dir lies outside the roots
    _, outcome = sweep(spec, units_of(spec), [KillAfter(1)])
    assert outcome == "killed"
    assert objects(store_uri) == []                          # no checkpoint kept, so none to fetch later


def trial_runs_of(spec) -> list:
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    return [r for r in mlflow_store.search_runs(mlflow_store.experiment_id(spec.experiment_name(), uri), uri)
            if records.KEY_TAG in r.data.tags]


def test_a_claim_taken_in_the_store_is_held_against_another_cache_folder(tmp_path, store_uri):
    """The claim does not depend on the folder: another node's sweep (another cache folder) waits."""
    ctx = {n: SweepContext("sqlite:///x.db", "1", "p", cache_dir=str(tmp_path / n), storage=store_uri)
           for n in ("a", "b")}
    entered, release, order = threading.Event(), threading.Event(), []

    def first():
        with resume.claim(ctx["a"], "k") as c:
            (c.path / "last.json").write_text("{}")
            entered.set()
            release.wait(10)
            order.append("first out")

    def second():
        with resume.claim(ctx["b"], "k"):
            order.append("second in")
    t1 = threading.Thread(target=first)
    t1.start()
    assert entered.wait(10)
    t2 = threading.Thread(target=second)
    t2.start()
    t2.join(3)
    assert order == []                         # still waiting, beyond the lease's TTL (renewed)
    assert not list((tmp_path / "b").glob("checkpoints/*/k.lock"))   # no flock involved
    release.set()
    t1.join(10)
    t2.join(10)
    assert order == ["first out", "second in"]


def test_tune_keeps_its_storage_in_the_store(tmp_path, store_uri, monkeypatch):
    from embinit.spec import load_spec
    from embinit.sweep import run_sweep
    from helpers.sweep import before_tune_state_goes, sweep_spec_data
    spec = load_spec(sweep_spec_data("tune-in-s3", tmp_path, {**TINY, "epochs": 1},
                                     mlflow={"tracking_uri": f"sqlite:///{tmp_path}/m.db", "log_plots": False}))
    seen = before_tune_state_goes(monkeypatch, lambda: objects(store_uri))
    result = run_sweep(spec, progress=False)
    assert result.n_finished == 1
    (during,) = seen
    assert any(k.startswith("ray_results/embinit_tune-in-s3_") for k in during), during
    stored = objects(store_uri)
    assert not any(k.startswith("ray_results/embinit_") for k in stored), stored   # gone with the run (tune_state)
    assert not any(k.startswith(("checkpoints/", "claims/")) for k in stored)   # recorded: nothing to resume
    assert not (Path(spec.cache_dir) / "ray_results").exists()
