"""The service under concurrent use, on the local Ray the API starts itself: experiments submitted at
the same moment each train their own trials into their own MLflow experiment; a burst of reads followed
by more idle time than AnyIO keeps a pool thread (10 s) does not take the local Ray down (its GCS and
raylet die with the thread that started them); later experiments still run. Tiny synthetic tasks, one
epoch each."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from service.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TERMINAL = ("succeeded", "failed", "cancelled")


def _spec(i: int) -> dict:
    # Distinct seeds per experiment, so no two experiments share a trial key.
    return {"name": f"conc-{i}", "tasks": [{"task": "synthetic_classification", "epochs": 1,
                                           "max_train_examples": 32, "d_model": 16, "layers": 1,
                                           "heads": 2, "ff_dim": 32}],
            "inits": ["xavier"], "seeds": [100 * i, 100 * i + 1], "retries": 0, "cache_dir": "cache",
            "resources": {"cpus": 1}, "mlflow": {"log_checkpoint": False, "log_plots": False}}


def _wait_all(client, ids: list[str], timeout: float = 600) -> dict[str, dict]:
    deadline, done = time.monotonic() + timeout, {}
    while time.monotonic() < deadline and len(done) < len(ids):
        for exp_id in ids:
            exp = client.get(f"/experiments/{exp_id}").json()
            if exp["status"] in TERMINAL:
                done[exp_id] = exp
        time.sleep(2)
    assert len(done) == len(ids), f"not finished in {timeout} s: {set(ids) - set(done)}"
    return done


def _submit_at_once(client, specs: list[dict]) -> list[str]:
    barrier = threading.Barrier(len(specs))

    def post(spec):
        barrier.wait()
        return client.post("/experiments", json=spec)
    with ThreadPoolExecutor(len(specs)) as pool:
        responses = list(pool.map(post, specs))
    assert [r.status_code for r in responses] == [202] * len(specs), [r.text for r in responses]
    return [r.json()["id"] for r in responses]


def _burst(client, ids: list[str], seconds: float = 4.0, clients: int = 24) -> None:
    """Many concurrent reads: the sync endpoints fill AnyIO's worker-thread pool."""
    stop = time.monotonic() + seconds

    def reader(n: int) -> int:
        count = 0
        while time.monotonic() < stop:
            for path in ("/health", "/experiments", f"/experiments/{ids[n % len(ids)]}"):
                assert client.get(path).status_code == 200
                count += 1
        return count
    with ThreadPoolExecutor(clients) as pool:
        assert sum(pool.map(reader, range(clients))) > clients


def _check_runs(tracking_uri: str, exps: dict[str, dict], keys: dict[str, list[str]]) -> None:
    """Every trial run lies in its own experiment's MLflow experiment, under one of its keys, once."""
    from mlflow import MlflowClient
    mlflow = MlflowClient(tracking_uri)
    for exp_id, exp in exps.items():
        runs = mlflow.search_runs([exp["mlflow"]["experiment_id"]])
        trial_runs = [r for r in runs if "embinit.trial_key" in r.data.tags]
        found = sorted(r.data.tags["embinit.trial_key"] for r in trial_runs)
        assert found == sorted(keys[exp_id]), (exp["name"], found, keys[exp_id])
        assert {r.info.status for r in trial_runs} == {"FINISHED"}, exp["name"]


@pytest.fixture
def ray_tmp(monkeypatch):
    import ray
    if ray.is_initialized():  # another test's Ray: the API must start its own
        ray.shutdown()
    tmp = tempfile.mkdtemp(prefix="eic-", dir="/tmp")  # short: Ray's socket paths are length-limited
    monkeypatch.setenv("RAY_TMPDIR", tmp)
    yield tmp
    if ray.is_initialized():
        ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


def test_simultaneous_experiments_burst_idle_and_more(ray_tmp, tmp_path):
    import ray
    (tmp_path / "data").mkdir()
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db",
                        tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", data_roots=[tmp_path / "data"],
                        pretrained_roots=[tmp_path / "data"], refresh_interval_s=0.5, max_active_experiments=8,
                        _env_file=None)
    with TestClient(create_app(settings)) as client:
        first = _submit_at_once(client, [_spec(i) for i in range(3)])
        _burst(client, first)
        time.sleep(12)  # longer than AnyIO keeps an idle worker thread (10 s)
        _burst(client, first, seconds=1.0, clients=4)  # the next calls retire the idle threads
        later = _submit_at_once(client, [_spec(i) for i in range(3, 5)])
        exps = _wait_all(client, first + later)
        keys = {e: [t["key"] for t in client.get(f"/experiments/{e}/trials").json()["items"]] for e in exps}
        for exp in exps.values():
            assert exp["status"] == "succeeded", exp
            assert exp["counts"]["finished"] == exp["n_trials"] == 2, exp
        _check_runs(f"sqlite:///{tmp_path}/mlflow.db", exps, keys)
        assert ray.is_initialized() and ray.cluster_resources().get("CPU", 0) > 0  # Ray still answers
        gcs = [p for p in _ray_processes(ray_tmp) if "gcs_server" in p]
        assert gcs, "the local Ray's GCS is gone"


def _ray_processes(temp_dir: str) -> list[str]:
    import psutil
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if temp_dir in cmd and proc.pid != os.getpid():
            out.append(cmd)
    return out
