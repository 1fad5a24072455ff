"""The readers of sweep runs, analysis runs and metric histories (embinit.tracking.run_readers): each gives frozen
records, and a history has one value per step, the one logged last. Real MLflow on a temporary SQLite
store (no Ray)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from embinit.tracking import mlflow_store, provenance, run_readers, run_writers, trial_run
from embinit.reproduction.blog import _curve_cells
from embinit.tracking.run_records import AnalysisRecord, SweepRecord

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
    assert (rec.spec_name, rec.status, rec.spec_hash, rec.n_trials, rec.experiment_id) == ("s", "RUNNING",
                                                                                           "feedc0de" * 2, "4", exp)
    assert rec.name.startswith("s #")   # the spec's name and the sweep's number in its experiment
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


def test_a_resumed_mnli_trial_logs_no_epoch_twice(store):
    """MNLI logs its validation loss per split (val/loss_matched), never val/loss: `finish` read the epochs
    already logged from val/loss, found none, and logged every epoch of the history again."""
    uri, exp = store
    config = {"task": "mnli", "init": "xavier", "seed": 1}
    first = trial_run.TrialRun.open(uri, exp, None, config, "mnli-killed", "Xavier", {"axes": {}, "point": {}})
    first.log_epoch(1, {"val/loss_matched": 0.9, "val/acc_matched": 0.5})
    resumed = trial_run.TrialRun(uri, first.run_id, reopened=True)
    resumed.log_epoch(2, {"val/loss_matched": 0.8, "val/acc_matched": 0.6})
    history = [{"epoch": 1, "val/loss_matched": 0.9, "val/acc_matched": 0.5},
               {"epoch": 2, "val/loss_matched": 0.8, "val/acc_matched": 0.6}]
    resumed.finish({"status": "finished", "config": config, "history": history, "best_epoch": 2,
                    "best": {"val/acc_matched": 0.6}}, [])
    for metric in ("val/loss_matched", "val/acc_matched"):
        steps = [m.step for m in mlflow_store.client(uri).get_metric_history(first.run_id, metric)]
        assert sorted(steps) == [1, 2], (metric, steps)


def test_a_trial_run_records_its_code_version(store):
    """The version is in the key too, which cannot be read back: the report needs it as a tag."""
    from embinit.config import CODE_VERSION
    uri, exp = store
    config = {"task": "synthetic_classification", "init": "xavier", "seed": 7}
    run = trial_run.TrialRun.open(uri, exp, None, config, "versioned", "Xavier", {"axes": {}, "point": {}})
    (rec,) = [r for r in run_readers.trial_records(exp, uri) if r.run_id == run.run_id]
    assert rec.code_version == CODE_VERSION


def _trial(uri: str, exp: str, key: str, seed: int, end: str) -> str:
    """A trial run of `key` closed as `end` (finished | diverged | failed | running), started now."""
    time.sleep(0.01)   # distinct start times: the newest is well defined
    run = trial_run.TrialRun.open(uri, exp, None, {"task": "synthetic_classification", "init": "xavier",
                                                   "seed": seed}, key, "Xavier", {"axes": {}, "point": {}})
    if end == "failed":
        run.fail("ValueError: boom")
    elif end != "running":
        run.finish({"status": end, "history": [{"epoch": 1, "val/loss": 1.0, "val/acc": 0.5}]}, [])
    return run.run_id


def test_finished_keys_are_the_records_by_key_chooses_among_finished_runs(store, monkeypatch):
    """finished_keys reads the shared record path (`trial_records` + `records.by_key`): the newest
    FINISHED run of each key (finished or diverged), never a failed or running one. On a SQL store it
    reads plain rows (`run_table`) like the other trial reads: no `search_runs` (before, it always
    searched)."""
    from embinit.tracking import records
    uri, _ = store
    exp = mlflow_store.ensure_experiment("finished-keys", uri)
    _trial(uri, exp, "retried", 0, "failed")
    retried = _trial(uri, exp, "retried", 0, "finished")         # failed, then finished
    _trial(uri, exp, "twice", 1, "finished")
    newer = _trial(uri, exp, "twice", 1, "finished")             # two results: the newer stands
    diverged = _trial(uri, exp, "diverged", 2, "diverged")       # a result too: never rerun
    _trial(uri, exp, "finished-then-failed", 3, "finished")
    _trial(uri, exp, "finished-then-failed", 3, "failed")
    _trial(uri, exp, "only-failed", 4, "failed")
    _trial(uri, exp, "running", 5, "running")

    def no_search(*a, **k):
        raise AssertionError("a SQL store's trials are read as plain rows, not searched")

    monkeypatch.setattr(run_readers, "search_runs", no_search)
    got = run_readers.finished_keys(exp, uri)
    assert got["retried"] == retried and got["twice"] == newer and got["diverged"] == diverged
    assert set(got) == {"retried", "twice", "diverged", "finished-then-failed"}
    shared = records.by_key(run_readers.trial_records(exp, uri, "FINISHED"))
    assert got == {key: rec.run_id for key, rec in shared.items()}
    for key, run_id in got.items():   # the worker's own lookup of one key agrees
        assert run_readers.finished_run(exp, uri, key).run_id == run_id


def test_finished_keys_on_a_tracking_server_searches(store, monkeypatch):
    """Where the store is not a SQL database this process reaches, the same records come from
    `search_runs` (as `trial_records` reads them)."""
    from embinit.tracking import run_table
    uri, _ = store
    exp = mlflow_store.ensure_experiment("finished-keys-searched", uri)
    _trial(uri, exp, "retried", 0, "failed")
    retried = _trial(uri, exp, "retried", 0, "finished")
    _trial(uri, exp, "twice", 1, "diverged")
    newer = _trial(uri, exp, "twice", 1, "finished")
    _trial(uri, exp, "only-failed", 2, "failed")
    direct = run_readers.finished_keys(exp, uri)
    monkeypatch.setattr(run_table, "rows", lambda *a, **k: None)
    assert run_readers.finished_keys(exp, uri) == direct == {"retried": retried, "twice": newer}


SPEC = {"name": "stored", "tasks": ["synthetic_classification"], "inits": ["xavier", "normal"], "seeds": 2}


def _sweep(uri: str, name: str, spec_yaml: str | None) -> tuple[str, SweepRecord]:
    """An experiment `name` whose one sweep run recorded `spec_yaml` (no spec.yaml artifact when None)."""
    from embinit.tracking.records import KIND_TAG
    exp = mlflow_store.ensure_experiment(name, uri)
    if spec_yaml is None:
        mlflow_store.client(uri).create_run(exp, run_name="old", tags={KIND_TAG: "sweep"})
    else:
        run_writers.start_parent_run(exp, uri, "cafe" * 4, spec_yaml, 4, run_name="stored")
    (run,) = run_readers.sweep_records(exp, uri)
    return exp, run


def _summary(uri: str, exp: str, run: SweepRecord) -> str:
    from types import SimpleNamespace

    from embinit.reproduction.data import ReproductionData
    from embinit.reproduction.runs import device_counts, sweep_lines
    found = device_counts(run.experiment_id, uri).get(run.run_id, Counter())   # as how_it_was_run reads them
    rep = SimpleNamespace(uri=uri, _specs={})
    rep.sweep_spec = lambda r: ReproductionData.sweep_spec(rep, r)   # the document's one cached reader
    lines, _ = sweep_lines(rep, exp, run, [], found)
    return next(ln for ln in lines if ln.startswith("- spec: "))


def test_completeness_and_the_reproduction_read_a_sweeps_spec_through_sweep_spec(store, monkeypatch):
    """The report's plan (`completeness.planned_in_mlflow`) and the reproduction's "How it was run"
    read a sweep run's spec.yaml through the one reader, `run_readers.sweep_spec` (before: a download
    and `load_spec` in one, `yaml.safe_load` of the text in the other)."""
    from embinit.report import completeness
    from embinit.spec import load_spec
    uri, _ = store
    spec = load_spec(SPEC)
    exp, run = _sweep(uri, "stored-spec", spec.to_yaml())
    stored = run_readers.sweep_spec(run, uri)
    assert stored.text == spec.to_yaml() and stored.problem is None
    assert stored.spec.spec_hash() == spec.spec_hash() and not stored.spec.drawn
    read = []
    real = run_readers.sweep_spec
    monkeypatch.setattr(run_readers, "sweep_spec", lambda r, u=None: read.append(r.run_id) or real(r, u))
    assert completeness.planned_in_mlflow(exp, uri) == completeness.planned_trials(spec.plan())
    summary = _summary(uri, exp, run)
    assert summary.startswith("- spec: the run's `spec.yaml` artifact (name `stored`, tasks "
                              "synthetic_classification, 2 inits, seeds [0, 1], spec hash `cafecafecafecafe`)")
    assert read == [run.run_id, run.run_id]


def test_a_sweep_without_a_spec_artifact(store):
    """A sweep run without spec.yaml (recorded before embinit kept one): an error naming the run from
    the reader; no plan for the report and "missing" in the reproduction, as before."""
    from embinit.report import completeness
    from embinit.errors import EmbinitError
    uri, _ = store
    exp, run = _sweep(uri, "no-spec-artifact", None)
    with pytest.raises(EmbinitError, match=rf"run 'old' \({run.run_id}\) has no readable spec.yaml artifact"):
        run_readers.sweep_spec(run, uri)
    assert completeness.planned_in_mlflow(exp, uri) is None
    assert "artifact (missing, spec hash `?`)" in _summary(uri, exp, run)


def test_a_recorded_spec_that_no_longer_loads_or_draws_its_trials(store):
    """A spec.yaml that this version does not load: its text, and why; the report has no plan. An
    Optuna search's spec loads but has no plan either (its trials are drawn while it runs)."""
    from embinit.report import completeness
    from embinit.spec import load_spec
    uri, _ = store
    exp, run = _sweep(uri, "spec-no-longer-loads", "name: old\nretired_field: 1\n")
    stored = run_readers.sweep_spec(run, uri)
    assert stored.spec is None and stored.text == "name: old\nretired_field: 1\n"
    assert "retired_field" in stored.problem
    assert completeness.planned_in_mlflow(exp, uri) is None
    summary = _summary(uri, exp, run)
    assert "it does not load in this version of embinit: invalid experiment spec" in summary
    drawn = load_spec({**SPEC, "search": {"method": "optuna", "num_samples": 2,
                                          "space": {"lr": {"low": 1e-4, "high": 1e-3, "log": True}}}})
    exp, run = _sweep(uri, "drawn-spec", drawn.to_yaml())
    assert run_readers.sweep_spec(run, uri).spec.drawn
    assert completeness.planned_in_mlflow(exp, uri) is None


def test_a_moved_store_reads_its_artifacts_beside_it(tmp_path):
    """A SQLite store committed with its artifacts (docs/reproduction/runs) and read from another
    checkout: MLflow recorded absolute artifact paths, so the sweep's spec.yaml is found under the
    store's own mlartifacts/ once the recorded folder is gone. An unmoved store, a non-file URI and a
    moved store without its artifacts are left to MLflow (the last: the reader's error, as before)."""
    import shutil

    from embinit.errors import EmbinitError
    from embinit.spec import load_spec
    old = tmp_path / "old" / "runs"
    old.mkdir(parents=True)
    uri = f"sqlite:///{old}/mlflow.db"
    text = load_spec(SPEC).to_yaml()
    _, run = _sweep(uri, "moved", text)
    assert run.artifact_uri.startswith(old.as_uri()) and mlflow_store.moved_artifacts(run.artifact_uri, uri) == \
        run.artifact_uri
    new = tmp_path / "elsewhere" / "runs"
    new.parent.mkdir()
    shutil.move(old, new)
    moved = f"sqlite:///{new}/mlflow.db"
    (again,) = run_readers.sweep_records(run.experiment_id, moved)
    assert again.artifact_uri == run.artifact_uri                       # still the recorded, now gone, path
    assert mlflow_store.moved_artifacts(again.artifact_uri, moved).startswith((new / "mlartifacts").as_uri())
    assert run_readers.sweep_spec(again, moved).text == text
    assert mlflow_store.moved_artifacts("s3://bucket/x/mlartifacts/1/a", moved) == "s3://bucket/x/mlartifacts/1/a"
    shutil.rmtree(new / "mlartifacts")
    assert mlflow_store.moved_artifacts(again.artifact_uri, moved) == again.artifact_uri
    with pytest.raises(EmbinitError, match="has no readable spec.yaml artifact"):
        run_readers.sweep_spec(again, moved)
