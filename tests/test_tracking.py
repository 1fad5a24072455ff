"""MLflow tracking: child runs keyed by trial key, reuse of a restarted attempt's run, finished-key
lookup, failures, orphan cleanup, list_trials. Real MLflow on a temporary SQLite store (no Ray)."""

from __future__ import annotations

import json

import pytest

from embinit import task_registry
from embinit.tracking import mlflow_store, records, run_readers, run_writers, trial_results, trial_run
from embinit.errors import EmbinitError

pytestmark = pytest.mark.slow  # creating an MLflow SQLite store takes a few seconds


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlflow.db"
    return uri, mlflow_store.ensure_experiment("track", uri)


def config(seed: int, task: str = "synthetic_classification") -> dict:
    return {"task": task, "init": "xavier", "seed": seed, "lr": 1e-3, "extras": {"a": 1}}


def result(history_epochs=(1, 2), status="finished") -> dict:
    return {"status": status, "history": [{"epoch": e, "train/loss": 1.0 / e, "val/loss": 2.0 / e,
                                           "val/acc": 0.5 + e / 10} for e in history_epochs],
            "best": {"val/acc": 0.7, "val/acc_epoch": 2}, "test": {}, "best_epoch": 2,
            "emb_stats_init": {"emb/std": 0.1, "emb/absorption": 2.0, "emb_src/std": 0.3},
            "emb_stats_best": {"emb/std": 0.2, "emb_src/std": 0.4}, "label": "Xavier",
            "wall_time_s": 3.0, "coverage": None}


def test_resolve_uri_makes_local_stores_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert mlflow_store.resolve_uri(None) == f"sqlite:///{tmp_path}/mlflow.db"
    assert mlflow_store.resolve_uri("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    assert mlflow_store.resolve_uri("runs") == (tmp_path / "runs").as_uri()
    assert mlflow_store.resolve_uri("http://host:5000") == "http://host:5000"
    assert mlflow_store.artifact_root(f"sqlite:///{tmp_path}/m.db") == (tmp_path / "mlartifacts").as_uri()


def test_no_mlflow_usage_reports_unless_the_user_asks(tmp_path, monkeypatch):
    """MLflow 3 reports usage to its maintainers from every process that logs; embinit's processes do
    not (as with Ray's usage stats), and a user's own setting stands."""
    from mlflow.telemetry.utils import is_telemetry_disabled

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    for var in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("mlflow.telemetry.utils._IS_IN_CI_ENV_OR_TESTING", False)  # as on a user's machine
    assert not is_telemetry_disabled()
    mlflow_store.client(uri)
    assert is_telemetry_disabled()
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "false")
    mlflow_store.client(uri)
    assert not is_telemetry_disabled()


def test_trial_run_records_params_tags_epochs_and_result(store, tmp_path):
    uri, exp = store
    run = trial_run.TrialRun.open(uri, exp, None, config(0), "key0", "Xavier", {"axes": {}, "point": {}})
    for h in result()["history"]:
        run.log_epoch(h["epoch"], h)
    plot = tmp_path / "curve.png"
    plot.write_bytes(b"png")
    run.finish(result(), [("plots", str(plot))])
    got = mlflow_store.client(uri).get_run(run.run_id)
    assert got.info.status == "FINISHED"
    assert got.data.params["lr"] == "0.001" and got.data.params["extras.a"] == "1"
    # the resolved config: task defaults filled in, unset options left out, never "None"
    assert got.data.params["epochs"] == "5" and got.data.params["batch_size"] == "32"
    assert "None" not in got.data.params.values() and "data_seed" not in got.data.params
    assert got.data.tags[records.KEY_TAG] == "key0" and got.data.tags[records.LABEL_TAG] == "Xavier"
    assert got.data.tags[records.INIT_TAG] == "Xavier"
    assert json.loads(got.data.tags[records.CONFIG_TAG])["seed"] == 0
    m = got.data.metrics
    assert m["best/val/acc"] == 0.7 and m["init/emb/std"] == 0.1
    # embedding statistics: the key ones as metrics, all of them in a table artifact
    assert not [k for k in m if k.startswith("best/emb") or k.startswith("init/emb_src")]
    table = json.loads(mlflow_store.client(uri).download_artifacts(run.run_id, "emb_stats.json", str(tmp_path))
                       and (tmp_path / "emb_stats.json").read_text())
    assert table["columns"] == ["statistic", "init", "best"]
    assert table["data"] == [["emb/absorption", 2.0, None], ["emb/std", 0.1, 0.2], ["emb_src/std", 0.3, 0.4]]
    # MLflow's mark of a table artifact (the UI shows the file as a table), as `log_table` would set it
    assert json.loads(got.data.tags["mlflow.loggedArtifacts"]) == [{"path": "emb_stats.json", "type": "table"}]
    assert m["best_epoch"] == 2
    history = mlflow_store.client(uri).get_metric_history(run.run_id, "val/loss")
    assert sorted(x.step for x in history) == [1, 2]       # logged per epoch, not again at the end
    arts = [a.path for a in mlflow_store.client(uri).list_artifacts(run.run_id, "plots")]
    assert arts == ["plots/curve.png"]
    assert run_readers.finished_keys(exp, uri)["key0"] == run.run_id
    assert run_readers.finished_run(exp, uri, "key0").run_id == run.run_id


def test_sweep_status():
    assert run_writers.sweep_status(cancelled=False, n_results=0, n_planned=3) == "FAILED"  # all failed
    assert run_writers.sweep_status(cancelled=False, n_results=1, n_planned=3) == "FINISHED"
    assert run_writers.sweep_status(cancelled=False, n_results=0, n_planned=0) == "FINISHED"
    assert run_writers.sweep_status(cancelled=True, n_results=0, n_planned=3) == "KILLED"


def test_finish_fills_epochs_missing_from_the_live_log(store):
    uri, exp = store
    run = trial_run.TrialRun.open(uri, exp, None, config(1), "key1", "Xavier", {})
    run.log_epoch(1, result()["history"][0])    # epoch 2's live log was lost (worker died)
    run.finish(result(), [])
    steps = sorted(x.step for x in mlflow_store.client(uri).get_metric_history(run.run_id, "val/loss"))
    assert steps == [1, 2]


def test_a_restarted_attempt_reuses_its_run(store):
    uri, exp = store
    parent = run_writers.start_parent_run(exp, uri, "hash", "name: x\n", 1)
    first = trial_run.TrialRun.open(uri, exp, parent, config(2), "key2", "Xavier", {})
    again = trial_run.TrialRun.open(uri, exp, parent, config(2), "key2", "Xavier", {})
    assert again.run_id == first.run_id
    by_id = trial_run.TrialRun.open(uri, exp, parent, config(2), "key2", "Xavier", {}, run_id=first.run_id)
    assert by_id.run_id == first.run_id
    assert run_writers.close_orphans(exp, uri, parent, "worker died") == 1
    got = mlflow_store.client(uri).get_run(first.run_id)
    assert got.info.status == "FAILED" and got.data.tags[records.ERROR_TAG] == "worker died"


def test_failed_and_diverged_runs_and_list_trials(store):
    uri, exp = store
    bad = trial_run.TrialRun.open(uri, exp, None, config(3), "key3", "Xavier", {})
    bad.fail("Traceback ...\nValueError: boom")
    div = trial_run.TrialRun.open(uri, exp, None, config(4), "key4", "Xavier", {})
    div.finish(result(history_epochs=(1,), status="diverged"), [])
    rows = {r["key"]: r for r in run_readers.list_trials("track", uri)}
    assert rows["key3"]["status"] == "failed" and "boom" in rows["key3"]["error"]
    assert rows["key4"]["status"] == "diverged"
    assert rows["key0"]["status"] == "finished" and rows["key0"]["value"] == 0.7
    assert rows["key0"]["metric"] == "best/val/acc" and rows["key0"]["config"]["seed"] == 0
    assert "key3" not in run_readers.finished_keys(exp, uri)
    assert "key4" in run_readers.finished_keys(exp, uri)   # a diverged trial is a result: never rerun


def test_unknown_experiment_is_a_user_error(store):
    with pytest.raises(EmbinitError, match="no MLflow experiment 'nope'"):
        run_readers.list_trials("nope", store[0])


def test_reported_metrics_per_task():
    assert task_registry.primary_metric("multi30k") == "test/bleu"
    assert task_registry.primary_metric("sst2") == "best/val/acc"
    assert task_registry.reported_metrics("mnli") == ["best/val/acc_matched", "best/val/acc_mismatched"]
    assert task_registry.primary_metric("wikitext2") == "test/ppl"
    assert task_registry.selection_metric("multi30k") == ("val/loss", "min")
    assert task_registry.selection_metric("mnli") == ("val/acc_matched", "max")


def test_a_table_artifact_is_the_json_mlflow_writes_with_nulls_for_non_numbers():
    """`table_json` writes what `MlflowClient.log_table` writes (pandas' split layout, no index), and a
    statistic that is NaN, infinite or missing is null, never the invalid JSON token NaN."""
    import io

    import numpy as np
    import pandas as pd

    columns = {"statistic": ["a", "b", "c"], "init": [np.float32(0.5), float("nan"), None],
               "best": [float("inf"), 2, 3.25]}
    text = trial_results.table_json(columns)
    assert json.loads(text) == {"columns": ["statistic", "init", "best"],
                                "data": [["a", 0.5, None], ["b", None, 2], ["c", None, 3.25]]}
    frame = pd.read_json(io.StringIO(text), orient="split")   # how MLflow reads a table back
    assert list(frame["statistic"]) == ["a", "b", "c"] and frame["best"].iloc[2] == 3.25


def test_every_validation_metric_is_logged_at_the_selected_epoch(store):
    """MNLI's checkpoint is selected on matched accuracy; `best/val/acc_mismatched` is mismatched's own
    maximum (the paper's report), `selected/val/*` the one checkpoint's values, which were not logged."""
    uri, exp = store
    accs = {1: (0.50, 0.52), 2: (0.61, 0.55), 3: (0.60, 0.58)}      # matched peaks at 2, mismatched at 3
    res = {**result((1, 2, 3)), "best_epoch": 2,
           "history": [{"epoch": e, "train/loss": 1.0, "val/loss": 2.0 / e, "val/acc_matched": m,
                        "val/acc_mismatched": mm} for e, (m, mm) in accs.items()],
           "best": {"val/acc_matched": 0.61, "val/acc_matched_epoch": 2,
                    "val/acc_mismatched": 0.58, "val/acc_mismatched_epoch": 3}}
    run = trial_run.TrialRun.open(uri, exp, None, config(5, "mnli"), "key5", "Xavier", {})
    run.finish(res, [])
    m = mlflow_store.client(uri).get_run(run.run_id).data.metrics
    assert m["best/val/acc_mismatched"] == 0.58 and m["selected/val/acc_mismatched"] == 0.55
    assert m["selected/val/acc_matched"] == 0.61 and m["selected/val/loss"] == 1.0
    assert not [k for k in m if k.startswith("selected/") and not k.startswith("selected/val/")]
    assert trial_results.selected_metrics(res["history"], None) == {}     # a diverged trial selected nothing
