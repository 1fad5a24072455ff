"""A sweep against a real `mlflow server` (HTTP tracking URI, proxied artifacts): the trial's worker
logs its run and uploads its checkpoint through the server, so nothing is staged on the wrong machine
(ray-project/ray #19263, #36257: loggers that ignore the tracking URI)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from embinit.tracking import mlflow_store, run_readers
from embinit.spec import load_spec
from embinit.sweep import run_sweep
from live_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen([str(mlflow_bin), "server", "--backend-store-uri", f"sqlite:///{root}/db.sqlite",
                             "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            # as compose runs it: MLflow 3's job runner (seven polling Huey consumers) off
                            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
                                 "MLFLOW_DISABLE_TELEMETRY": "true"})
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).read() == b"OK":
                    break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail("mlflow server did not come up in 120 s")
        yield url, root / "artifacts", f"sqlite:///{root}/db.sqlite"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)   # the server and its uvicorn worker: our own process group
        proc.wait(timeout=30)


@pytest.mark.parametrize("records", ["server", "database"])
def test_sweep_logs_through_an_mlflow_server(server, tmp_path, records):
    """`records`: the trials' run records go through the server, or (EMBINIT_TRACKING_WRITE_DIRECT) to the
    database behind it, `run_sweep(store_uri=...)`; artifacts go through the server either way."""
    url, artifacts, db = server
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    name = f"via-server-{records}"
    spec = load_spec({"name": name, "seeds": [0], "inits": ["xavier"], "retries": 0,
                      "tasks": [{"task": "synthetic_classification", "epochs": 1, "max_train_examples": 100,
                                 "d_model": 16, "ff_dim": 32, "heads": 2}],
                      "cache_dir": str(tmp_path / "cache"), "mlflow": {"tracking_uri": url}})
    result = run_sweep(spec, progress=False, store_uri=db if records == "database" else None)
    assert (result.n_finished, result.tracking_uri) == (1, url)
    (trial,) = run_readers.list_trials(name, url)
    run = mlflow_store.client(url).get_run(trial["run_id"])
    assert run.info.status == "FINISHED" and "best/val/acc" in run.data.metrics
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")     # proxied by the server
    uploaded = {p.name for p in (artifacts / result.experiment_id).rglob("*") if p.is_file()}
    assert {"best.pt", "result.json", "val_curve.png", "init_histogram.png", "emb_stats.json"} <= uploaded
    assert not (tmp_path / "mlartifacts").exists()


def test_trials_write_their_runs_to_the_database_and_only_artifacts_through_the_server(server, tmp_path,
                                                                                       monkeypatch):
    """EMBINIT_TRACKING_WRITE_DIRECT: a trial given the database behind the server (`store_uri`) writes
    its run's records there and sends the server nothing but its artifacts; the run reads the same through
    the server, and its embedding statistics are a table the MLflow client (and UI) reads as one."""
    import requests
    from ray import tune

    from embinit.tracking import records, run_writers
    from embinit.sweep.trainable import train_unit
    from embinit.sweep.work import SweepContext, Unit, work_item

    url, artifacts, db = server
    spec = load_spec({"name": "direct-writes", "seeds": [0], "inits": ["xavier"], "retries": 0,
                      "tasks": [{"task": "synthetic_classification", "epochs": 2, "max_train_examples": 100,
                                 "d_model": 16, "ff_dim": 32, "heads": 2}],
                      "cache_dir": str(tmp_path / "cache"), "mlflow": {"tracking_uri": url, "log_plots": False}})
    exp_id = mlflow_store.ensure_experiment(spec.experiment_name(), url)
    parent = run_writers.start_parent_run(exp_id, url, spec.spec_hash(), spec.to_yaml(), 1)
    shared = SweepContext(url, exp_id, parent, cache_dir=spec.cache_dir, store_uri=db)
    units = [Unit((work_item(spec, p),)) for p in spec.plan()]
    sent: list[tuple[str, str]] = []
    request = requests.Session.request

    def counted(self, method, where, *a, **kw):
        sent.append((method, where))
        return request(self, method, where, *a, **kw)
    monkeypatch.setattr(requests.Session, "request", counted)
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: None)   # Tune's session, outside Tune
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    train_unit({"unit": 0}, shared, units)
    monkeypatch.setattr(requests.Session, "request", request)

    assert sent and all("/api/2.0/mlflow-artifacts/" in where for _, where in sent), sent   # artifacts only
    (trial,) = run_readers.list_trials("direct-writes", url)                 # read through the server
    run = mlflow_store.client(url).get_run(trial["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags[records.STATUS_TAG] == "finished"
    assert "best/val/acc" in run.data.metrics and run.data.tags[records.PARENT_TAG] == parent
    uploaded = {p.name for p in artifacts.rglob("*") if p.is_file()}
    assert {"best.pt", "result.json", "emb_stats.json"} <= uploaded
    import mlflow
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(url)   # `load_table` searches through the fluent API's URI, not its client's
    try:
        table = mlflow_store.client(url).load_table(exp_id, "emb_stats.json", run_ids=[trial["run_id"]])
    finally:
        mlflow.set_tracking_uri(before)
    assert list(table.columns) == ["statistic", "init", "best"] and "emb/std" in set(table["statistic"])


def test_a_dry_run_reads_the_trials_a_tracking_server_has_finished(server, tmp_path):
    """A dry run against an `mlflow server` reads the spec's experiment through it, as the run does: a key
    the server has finished is marked reused (it was read as still to train, every trial of it)."""
    from embinit.cli.dry_run import dry_run
    from embinit.tracking import trial_run
    url, _, _ = server
    spec = load_spec({"name": "dry-via-server", "seeds": [0, 1], "inits": ["xavier"],
                      "tasks": [{"task": "synthetic_classification", "epochs": 1, "d_model": 16, "heads": 2}],
                      "cache_dir": str(tmp_path / "cache"), "mlflow": {"tracking_uri": url}})
    first, second = spec.plan()
    exp = mlflow_store.ensure_experiment(spec.experiment_name(), url)
    run = trial_run.TrialRun.open(url, exp, None, first.config, first.key, first.label, {"axes": {}, "point": {}})
    run.finish({"status": "finished", "history": [{"epoch": 1, "val/loss": 1.0, "val/acc": 0.5}],
                "best": {"val/acc": 0.5}, "best_epoch": 1, "test": {"test/acc": 0.5}}, [])
    lines = dry_run(spec).splitlines()
    assert any(first.key in line and "[finished: reused]" in line for line in lines)
    assert any(second.key in line and "reused" not in line for line in lines)


def test_prune_reads_and_writes_the_experiment_through_a_tracking_server(server, tmp_path):
    """`--prune-checkpoints` refused a tracking server ("cannot be read here"), though the run, the dry run
    and the report all read one; it now reads the experiment through it, removes the retired folder and
    drops the pruned run's checkpoint tag through it."""
    from embinit.checkpoint_files import LAST, LAST_INFO, last_info_text
    from embinit.cli.prune import prune_checkpoints
    from embinit.sweep import trial_folders
    from embinit.tracking.records import CHECKPOINT_TAG
    from helpers.sweep import interrupted_after_epoch
    url, _, _ = server
    raw = {"name": "prune-via-server", "seeds": [0], "inits": ["xavier"],
           "tasks": [{"task": "synthetic_classification", "epochs": 2, "d_model": 16, "heads": 2}],
           "cache_dir": str(tmp_path / "cache"), "mlflow": {"tracking_uri": url}}
    before = load_spec(raw)
    exp, old, run = interrupted_after_epoch(url, before, 1)
    folder = trial_folders.experiment_folder(before.cache_dir, url, exp) / old.key
    folder.mkdir(parents=True)
    (folder / LAST).write_bytes(b"\0" * 100)
    (folder / LAST_INFO).write_text(last_info_text(old.key, 1))
    edited = load_spec({**raw, "tasks": [{**raw["tasks"][0], "epochs": 3}]})
    text = prune_checkpoints(edited)
    assert text.startswith("removed 1 checkpoint folder") and old.key in text, text
    assert not folder.exists()
    assert CHECKPOINT_TAG not in mlflow_store.client(url).get_run(run.run_id).data.tags
