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

from embinit import mlflow_store, run_readers
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
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
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
        yield url, root / "artifacts"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)   # the server and its uvicorn worker: our own process group
        proc.wait(timeout=30)


def test_sweep_logs_through_an_mlflow_server(server, tmp_path):
    url, artifacts = server
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    spec = load_spec({"name": "via-server", "seeds": [0], "inits": ["xavier"], "retries": 0,
                      "tasks": [{"task": "synthetic_classification", "epochs": 1, "max_train_examples": 100,
                                 "d_model": 16, "ff_dim": 32, "heads": 2}],
                      "cache_dir": str(tmp_path / "cache"), "mlflow": {"tracking_uri": url}})
    result = run_sweep(spec, progress=False)
    assert (result.n_finished, result.tracking_uri) == (1, url)
    (trial,) = run_readers.list_trials("via-server", url)
    run = mlflow_store.client(url).get_run(trial["run_id"])
    assert run.info.status == "FINISHED" and "best/val/acc" in run.data.metrics
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")     # proxied by the server
    uploaded = {p.name for p in artifacts.rglob("*") if p.is_file()}
    assert {"best.pt", "result.json", "val_curve.png", "init_histogram.png"} <= uploaded
    assert not (tmp_path / "mlartifacts").exists()
