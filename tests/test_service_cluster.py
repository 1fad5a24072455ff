"""Integration: the API drives a real two-node Ray cluster on loopback (head 127.0.0.2, worker
127.0.0.3), a tiny synthetic experiment runs through it, its trials run on both nodes and land in
MLflow, and a restarted API (a new app instance on the same state database) shows the true state. The
cluster runs with Ray's token auth on, as docker-compose.yml's does: its head listens on every interface.

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
from helpers.ray_cluster import RAY, processes, stop_cluster, token_auth_here, token_env, write_token
from helpers.ray_cluster import free_port as _free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEAD, WORKER = "127.0.0.2", "127.0.0.3"
SPEC = {"name": "cluster-it", "tasks": [{"task": "synthetic_classification", "epochs": 1,
                                         "max_train_examples": 64}],
        "inits": ["xavier", "normal"], "seeds": 2, "max_concurrent": 2, "retries": 0,
        "resources": {"cpus": 1}, "mlflow": {"log_checkpoint": False, "log_plots": False}}


@pytest.fixture(scope="module")
def cluster():
    """The two-node cluster with Ray's token auth on (`ray start --head` listens on every interface, not
    127.0.0.2 alone), a fresh token in a 0600 file in its temp dir; this process (the API, its Ray
    driver) uses it meanwhile, and gets its auth settings back afterwards (`token_auth_here`)."""
    import ray
    if ray.is_initialized():  # another test's Ray, connected with its auth settings
        ray.shutdown()
    temp_dir = tempfile.mkdtemp(prefix="eit-", dir="/tmp")  # short: Ray's socket paths are length-limited
    token = write_token(temp_dir)
    env = token_env(token)
    port = _free_port(HEAD)
    common = ["--num-cpus=1", "--num-gpus=0", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
    try:
        with token_auth_here(token):
            try:
                subprocess.run([RAY, "start", "--head", f"--node-ip-address={HEAD}", f"--port={port}",
                                "--include-dashboard=false", *common], env=env, check=True, capture_output=True,
                               timeout=180)
                subprocess.run([RAY, "start", f"--address={HEAD}:{port}", f"--node-ip-address={WORKER}", *common],
                               env=env, check=True, capture_output=True, timeout=180)
                servers = [p for p in processes(temp_dir) if p.name() in ("gcs_server", "raylet")]
                assert len(servers) == 3 and all(p.environ().get("RAY_AUTH_MODE") == "token" for p in servers)
                yield f"{HEAD}:{port}"
            except subprocess.CalledProcessError as e:
                pytest.fail(f"could not start the loopback Ray cluster: {e.stderr.decode()[-2000:]}")
            finally:
                if ray.is_initialized():
                    ray.shutdown()
                stop_cluster(temp_dir)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)   # the token last: Ray here reads it no more


def test_the_process_gets_its_ray_auth_back(tmp_path):
    """What the cluster fixture does to this process: token auth while it is open, the environment's
    auth settings (and Ray's reading of them) as they were afterwards, so the local Rays of later tests
    in this process start as before (with no auth, not with a token that is gone)."""
    from ray._raylet import AuthenticationMode, AuthenticationTokenLoader, get_authentication_mode
    names = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_USAGE_STATS_ENABLED")
    before, mode = {k: os.environ.get(k) for k in names}, get_authentication_mode()
    token = write_token(str(tmp_path))
    assert os.stat(token).st_mode & 0o777 == 0o600
    with token_auth_here(token):
        assert get_authentication_mode() == AuthenticationMode.TOKEN
        assert AuthenticationTokenLoader.instance().get_raw_token() == open(token).read()
    assert {k: os.environ.get(k) for k in names} == before and get_authentication_mode() == mode


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
