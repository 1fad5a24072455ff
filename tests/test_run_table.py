"""The SQL reader of trial runs (embinit.tracking.run_table) gives the records `search_runs` gives, run for run,
on SQLite and on PostgreSQL: every status, NaN and infinite metrics, deleted runs, other experiments,
sweep and analysis runs beside the trials, and the status and sweep filters. Real MLflow stores."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from embinit.tracking import mlflow_store, records, run_readers, run_table, run_writers, trial_run
from embinit.tracking.prepare import prepare_store
from helpers.postgres import local_server_or_skip

pytestmark = pytest.mark.slow  # two MLflow stores, one on a PostgreSQL server the test starts


def _result(loss: float, status: str = "finished") -> dict:
    return {"status": status, "history": [{"epoch": 1, "val/loss": loss + 1}, {"epoch": 2, "val/loss": loss}],
            "best": {"val/loss": loss}, "test": {"test/bleu": float("nan"), "test/loss": float("inf")},
            "best_epoch": 2, "label": "Xavier", "emb_stats_init": {"emb/std": 0.5}}


def _fill(uri: str) -> tuple[str, list[str]]:
    """An experiment with a trial of each kind, two sweeps, an analysis run, a deleted trial, and a
    second experiment; returns the first's id and its sweep run ids."""
    prepare_store(uri)
    exp = mlflow_store.ensure_experiment("table", uri)
    other = mlflow_store.ensure_experiment("table-other", uri)
    sweeps = [run_writers.start_parent_run(exp, uri, h * 64, f"name: {h}\n", 3) for h in "ab"]
    config = {"task": "synthetic_classification", "init": "xavier"}

    def trial(key: str, seed: int, parent: str | None, exp_id: str = exp) -> trial_run.TrialRun:
        return trial_run.TrialRun.open(uri, exp_id, parent, {**config, "seed": seed}, key, "Xavier",
                                       {"axes": {"init": "xavier"}, "point": {}})
    trial("done", 0, sweeps[0]).finish(_result(0.5), [])
    trial("diverged", 1, sweeps[0]).finish(_result(9.0, status="diverged"), [])
    failed = trial("failed", 2, sweeps[1])
    failed.log_epoch(1, {"val/loss": 3.0}, checkpoint=True)
    failed.fail("RuntimeError: out of memory")
    running = trial("running", 3, sweeps[1])
    running.log_epoch(1, {"val/loss": 2.0, "val/acc": float("nan")}, checkpoint=True)
    running.log_epoch(2, {"val/loss": 1.5, "val/acc": 0.2})
    time.sleep(0.01)                                   # a resumed attempt re-logs epoch 2, later
    trial_run.TrialRun(uri, running.run_id, reopened=True).log_epoch(2, {"val/loss": 1.7, "val/acc": 0.3})
    cancelled = trial("cancelled", 4, None)
    cancelled.fail("stopped", status="KILLED")
    gone = trial("deleted", 5, sweeps[0])
    mlflow_store.client(uri).delete_run(gone.run_id)
    trial("elsewhere", 6, None, exp_id=other).finish(_result(0.1), [])
    run_writers.log_analysis_run("table", uri, "similarity", "knn", {"k": 10}, {"sim/mean": 0.3}, {})
    return exp, sweeps


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(request, tmp_path_factory):
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path_factory.mktemp('table')}/mlflow.db"
        yield uri, *_fill(uri)
        return
    with local_server_or_skip() as uri:
        yield uri, *_fill(uri)


def _as_json(recs) -> list[str]:
    """Records comparable with NaN inside (NaN != NaN)."""
    return [json.dumps(dataclasses.asdict(r), sort_keys=True) for r in recs]


def _by_search(exp: str, uri: str, filter_string: str) -> list[records.TrialRecord]:
    return records.from_runs(mlflow_store.search_runs(exp, uri, filter_string))


def test_the_sql_reader_gives_the_records_search_runs_gives(store):
    uri, exp, sweeps = store
    assert run_table.rows(exp, uri) is not None         # the SQL path is the one taken
    got = run_readers.trial_records(exp, uri)
    assert sorted(r.key for r in got) == ["cancelled", "diverged", "done", "failed", "running"]
    assert _as_json(got) == _as_json(_by_search(exp, uri, ""))   # same records, same (newest first) order
    done = next(r for r in got if r.key == "done")
    assert done.metrics["best/val/loss"] == 0.5 and done.metrics["test/bleu"] != done.metrics["test/bleu"]
    assert done.name == "Xavier-s0 init=xavier"   # its run's name, read from the runs table (the API's `/trials`)


@pytest.mark.parametrize("status,parent", [("FINISHED", None), ("RUNNING", None), (None, 0), (None, 1),
                                           ("FAILED", 1), ("RUNNING", 0)])
def test_the_status_and_sweep_filters_match_mlflows(store, status, parent):
    uri, exp, sweeps = store
    parent_id = sweeps[parent] if parent is not None else None
    wanted = ([f"attributes.status = '{status}'"] if status else []) + (
        [f"tags.`{records.PARENT_TAG}` = '{parent_id}'"] if parent_id else [])
    got = run_readers.trial_records(exp, uri, status=status, parent=parent_id)
    assert _as_json(got) == _as_json(_by_search(exp, uri, " and ".join(wanted)))


@pytest.mark.parametrize("key", ["done", "diverged", "failed", "running", "cancelled", "deleted", "elsewhere", "none"])
def test_a_key_lookup_gives_the_records_mlflows_search_gives(store, key):
    """What a worker reads before training a key: the same records as MLflow's tag search, of this
    experiment only, deleted runs left out."""
    uri, exp, _ = store
    got = run_readers.key_records(exp, uri, key)
    assert [r.key for r in got] == ([key] if key not in ("deleted", "elsewhere", "none") else [])
    assert _as_json(got) == _as_json(_by_search(exp, uri, f"tags.`{records.KEY_TAG}` = '{key}'"))


def test_a_tracking_server_is_read_with_search_runs():
    assert run_table.rows("1", "http://127.0.0.1:1") is None
    assert run_table.is_sql_store("sqlite:///x.db") and run_table.is_sql_store("postgresql+psycopg://h/db")


@pytest.mark.parametrize("metric", ["val/loss", "val/acc", "test/bleu", "absent"])
def test_histories_of_many_runs_match_one_call_per_run(store, metric):
    """The report's mean curves read every run's history: in a few queries, with the same one value per
    step (the one logged last: epoch 2's re-logged 1.7), NaN included, as one MLflow call per run."""
    uri, exp, _ = store
    run_ids = [r.run_id for r in run_readers.trial_records(exp, uri)]
    assert run_table.histories(uri, run_ids, metric) is not None
    many = run_readers.metric_histories(uri, run_ids, metric)
    one_by_one = {run_id: run_readers.metric_history(uri, run_id, metric) for run_id in run_ids}
    assert {k: repr(v) for k, v in many.items()} == {k: repr(v) for k, v in one_by_one.items()}
    if metric == "val/loss":
        running = next(r.run_id for r in run_readers.trial_records(exp, uri) if r.key == "running")
        assert many[running].by_step == {1: 2.0, 2: 1.7}
