"""The readers of sweep runs, analysis runs and metric histories (embinit.run_readers): each gives frozen
records, and a history has one value per step, the one logged last. Real MLflow on a temporary SQLite
store (no Ray)."""

from __future__ import annotations

import time

import pytest

from embinit import mlflow_store, provenance, run_readers, run_writers, trial_run
from embinit.reproduction.blog import _curve_cells
from embinit.run_records import AnalysisRecord, SweepRecord

pytestmark = pytest.mark.slow  # creating an MLflow SQLite store takes a few seconds


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlflow.db"
    return uri, mlflow_store.ensure_experiment("readers", uri)


def _relogged_run(uri: str, exp: str) -> str:
    """A trial that logged epochs 1-3, died, and whose resumed attempt logged epoch 3 again (lower)."""
    config = {"task": "synthetic_classification", "init": "xavier", "seed": 0}
    first = trial_run.TrialRun.open(uri, exp, None, config, "relogged", "Xavier", {"axes": {}, "point": {}})
    for epoch, loss in ((1, 0.9), (2, 0.7), (3, 0.6)):
        first.log_epoch(epoch, {"val/loss": loss})
        first.log_metrics({"sim/knn_overlap_mean": loss}, step=epoch)
    time.sleep(0.01)  # the resumed attempt logs later (a later timestamp)
    resumed = trial_run.TrialRun(uri, first.run_id, reopened=True)
    resumed.log_epoch(3, {"val/loss": 0.5})
    resumed.log_metrics({"sim/knn_overlap_mean": 0.5}, step=3)
    return first.run_id


def test_a_relogged_step_has_one_value_the_last_logged(store):
    uri, exp = store
    run_id = _relogged_run(uri, exp)
    assert len(mlflow_store.client(uri).get_metric_history(run_id, "val/loss")) == 4   # MLflow keeps both
    hist = run_readers.metric_history(uri, run_id, "val/loss")
    assert hist.points == ((1, 0.9), (2, 0.7), (3, 0.5))
    assert hist.by_step == {1: 0.9, 2: 0.7, 3: 0.5} and hist.steps == {1, 2, 3}
    assert (hist.run_id, hist.metric) == (run_id, "val/loss")
    # the reproduction's KNN-blog cells read the same history: its end is the re-logged value
    cells = _curve_cells(uri, run_id, "overlap")
    assert (cells["end"], cells["end_step"], cells["init"]) == (0.5, 3, 0.9)
    assert run_readers.metric_history(uri, run_id, "no/such/metric").points == ()


def test_sweep_runs_are_read_as_records(store):
    uri, exp = store
    parent = run_writers.start_parent_run(exp, uri, "feedc0de" * 2, "name: s\n", 4, run_name="s")
    provenance.record(parent, uri, {provenance.COMMAND_TAG: "embinit run s.yaml"})
    (rec,) = [r for r in run_readers.sweep_records(exp, uri) if r.run_id == parent]
    assert isinstance(rec, SweepRecord)
    assert (rec.name, rec.status, rec.spec_hash, rec.n_trials, rec.experiment_id) == ("s", "RUNNING", "feedc0de" * 2,
                                                                                      "4", exp)
    assert rec.start_ms > 0 and rec.end_ms is None and rec.artifact_uri
    assert provenance.read(rec.tags)["command"] == "embinit run s.yaml"
    run_writers.end_parent_run(parent, uri, "FINISHED", None, {})
    (done,) = run_readers.sweep_records(exp, uri, f"tags.`embinit.spec_hash` = '{'feedc0de' * 2}'")
    assert done.status == "FINISHED" and done.end_ms >= done.start_ms
    assert all(r.run_id != parent for r in run_readers.trial_records(exp, uri))   # not a trial


def test_analysis_runs_are_read_as_records(store):
    uri, _ = store
    run_id = run_writers.log_analysis_run("readers-analysis", uri, "analogy", "analogy-seed1", {"seed": 1},
                                          {"analogy/raw/correct": 3.0}, {"rows": []})
    (rec,) = run_readers.analysis_records("readers-analysis", uri, "analogy")
    assert isinstance(rec, AnalysisRecord)
    assert (rec.run_id, rec.kind, rec.name, rec.status) == (run_id, "analogy", "analogy-seed1", "FINISHED")
    assert rec.metrics == {"analogy/raw/correct": 3.0} and rec.params == {"seed": "1"}
    assert run_readers.analysis_records("readers-analysis", uri, "similarity") == []
    assert run_readers.analysis_records("no-such-experiment", uri, "analogy") == []


def test_a_resumed_attempt_logs_the_epochs_its_dead_attempt_checkpointed_but_never_logged(store):
    """The store's checkpoint is synced before its epoch is logged (TrialReporter.on_epoch_end): a worker
    lost between the two leaves MLflow one epoch behind the checkpoint. The resumed attempt's result
    carries that epoch in its history; `finish` logs it, once, and leaves the epochs already logged."""
    uri, exp = store
    config = {"task": "synthetic_classification", "init": "xavier", "seed": 1}
    first = trial_run.TrialRun.open(uri, exp, None, config, "killed-after-sync", "Xavier", {"axes": {}, "point": {}})
    for epoch, loss in ((1, 0.9), (2, 0.8)):
        first.log_epoch(epoch, {"val/loss": loss, "train/loss": loss + 0.1})
    resumed = trial_run.TrialRun(uri, first.run_id, reopened=True)   # resumed after epoch 3's checkpoint
    resumed.log_epoch(4, {"val/loss": 0.6, "train/loss": 0.7})
    history = [{"epoch": e, "val/loss": v, "train/loss": v + 0.1} for e, v in ((1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6))]
    resumed.finish({"status": "finished", "history": history, "best": {"val/loss": 0.6}, "best_epoch": 4}, [])
    for metric in ("val/loss", "train/loss"):
        steps = [m.step for m in mlflow_store.client(uri).get_metric_history(first.run_id, metric)]
        assert sorted(steps) == [1, 2, 3, 4], (metric, steps)
    assert run_readers.metric_history(uri, first.run_id, "val/loss").by_step[3] == 0.7


def test_a_trial_run_records_its_code_version(store):
    """The version is in the key too, which cannot be read back: the report needs it as a tag."""
    from embinit.config import CODE_VERSION
    uri, exp = store
    config = {"task": "synthetic_classification", "init": "xavier", "seed": 7}
    run = trial_run.TrialRun.open(uri, exp, None, config, "versioned", "Xavier", {"axes": {}, "point": {}})
    (rec,) = [r for r in run_readers.trial_records(exp, uri) if r.run_id == run.run_id]
    assert rec.code_version == CODE_VERSION
