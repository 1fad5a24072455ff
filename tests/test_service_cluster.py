"""Integration: the API drives a real two-node Ray cluster on loopback (head 127.0.0.2, worker
127.0.0.3), a tiny synthetic experiment runs through it, its trials run on both nodes and land in
MLflow, and a restarted API (a new app instance on the same state database) shows the true state.

Only the Ray processes this test started are stopped (found by the test's own temp dir, ended by pid):
`ray stop` would also end other Ray clusters on the machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from embinit.tracking.records import NODE_TAG
from service.settings import Settings
from helpers.ray_cluster import RAY, stop_cluster
from helpers.ray_cluster import free_port as _free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEAD, WORKER = "127.0.0.2", "127.0.0.3"
SPEC = {"name": "cluster-it", "tasks": [{"task": "synthetic_classification", "epochs": 1,
                                         "max_train_examples": 64}],
        "inits": ["xavier", "normal"], "seeds": 2, "max_concurrent": 2, "retries": 0,
        "resources": {"cpus": 1}, "mlflow": {"log_checkpoint": False, "log_plots": False}}


@pytest.fixture(scope="module")
def cluster():
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    temp_dir = tempfile.mkdtemp(prefix="eit-", dir="/tmp")  # short: Ray's socket paths are length-limited
    port = _free_port(HEAD)
    common = ["--num-cpus=1", "--num-gpus=0", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
    try:
        subprocess.run([RAY, "start", "--head", f"--node-ip-address={HEAD}", f"--port={port}",
                        "--include-dashboard=false",
                        *common], env=env, check=True, capture_output=True, timeout=180)
        subprocess.run([RAY, "start", f"--address={HEAD}:{port}", f"--node-ip-address={WORKER}", *common],
                       env=env, check=True, capture_output=True, timeout=180)
        yield f"{HEAD}:{port}"
    except subprocess.CalledProcessError as e:
        pytest.fail(f"could not start the loopback Ray cluster: {e.stderr.decode()[-2000:]}")
    finally:
        import ray
        if ray.is_initialized():
            ray.shutdown()
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait(client, exp_id: str, until, timeout: float = 420) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exp = client.get(f"/experiments/{exp_id}").json()
        if until(exp):
            return exp
        time.sleep(2)
    raise AssertionError(f"experiment {exp_id} did not get there in {timeout} s: {exp}")


def test_experiment_runs_on_both_nodes_and_survives_an_api_restart(cluster, tmp_path):
    import ray
    if ray.is_initialized():  # another test's Ray: the API must connect to this cluster
        ray.shutdown()
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db",
                        tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
                        ray_address=cluster, ray_node_ip=HEAD, data_roots=[tmp_path], pretrained_roots=[tmp_path],
                        refresh_interval_s=0.5, _env_file=None)
    with TestClient(create_app(settings)) as client:
        submitted = client.post("/experiments", json=SPEC)
        assert submitted.status_code == 202, submitted.text
        exp_id = submitted.json()["id"]
        _wait(client, exp_id, lambda e: e["status"] != "queued")
    # The API is gone (its lifespan disconnected from Ray); the detached driver keeps training.
    assert not ray.is_initialized()
    with TestClient(create_app(settings)) as client:
        exp = _wait(client, exp_id, lambda e: e["status"] in ("succeeded", "failed", "cancelled"))
        assert exp["status"] == "succeeded", exp
        assert exp["counts"]["finished"] == 4 and exp["progress"] == 1.0
        assert exp["mlflow"]["experiment_id"] is not None
        trials = client.get(f"/experiments/{exp_id}/trials").json()["items"]
        assert [t["status"] for t in trials] == ["finished"] * 4
        assert all(t["run_id"] and t["best_metric"] is not None for t in trials)
        results = client.get(f"/experiments/{exp_id}/results").json()
        assert results and client.get(f"/experiments/{exp_id}/results", params={"format": "csv"}).text
        again = client.post("/experiments", json=SPEC)
        assert again.status_code == 200 and again.json()["id"] == exp_id
    from mlflow import MlflowClient
    mlflow = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = mlflow.search_runs([exp["mlflow"]["experiment_id"]])
    nodes = {r.data.tags.get(NODE_TAG) for r in runs if "embinit.trial_key" in r.data.tags}
    assert nodes == {HEAD, WORKER}, f"trials ran on {nodes}"
    assert sorted(r.info.run_id for r in runs if "embinit.trial_key" in r.data.tags) == \
        sorted(t["run_id"] for t in trials)


def test_cancel_stops_running_trials_on_the_cluster(cluster, tmp_path):
    import ray
    if ray.is_initialized():
        ray.shutdown()
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db",
                        tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", ray_address=cluster, ray_node_ip=HEAD,
                        data_roots=[tmp_path], pretrained_roots=[tmp_path], refresh_interval_s=0.5,
                        _env_file=None)
    long_spec = {**SPEC, "name": "cluster-cancel",
                 "tasks": [{"task": "synthetic_classification", "epochs": 500, "max_train_examples": 256}]}
    with TestClient(create_app(settings)) as client:
        exp_id = client.post("/experiments", json=long_spec).json()["id"]
        _wait(client, exp_id, lambda e: e["counts"].get("running", 0) > 0)
        r = client.delete(f"/experiments/{exp_id}")
        assert r.status_code == 202 and r.json()["cancel_requested"] is True
        exp = _wait(client, exp_id, lambda e: e["status"] not in ("queued", "running"), timeout=180)
        assert exp["status"] == "cancelled", exp
        assert exp["counts"]["finished"] == 0  # 500 epochs: nothing finished before the cancel
        trials = client.get(f"/experiments/{exp_id}/trials").json()["items"]
        assert "running" not in {t["status"] for t in trials}  # the stopped trials' runs were closed
        driver = client.get(f"/experiments/{exp_id}").json()["driver"]
        with pytest.raises(ValueError):
            ray.get_actor(driver, namespace="embinit")  # the driver was removed once its state was recorded
