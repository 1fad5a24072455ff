"""A slow or absent MLflow does not take the API down (issue 20, item 9): with a tracking server that
accepts connections and never answers, and 45 concurrent readers, on SQLite and on PostgreSQL, every
read answers (the stored state, or 503 with `Retry-After` where only MLflow has the answer), `/health`
answers `ok`, and the list and a submission still work: no database connection waits on MLflow."""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from service.fakes import FakeCluster, FakeRunner
from service.main import create_app
from service.settings import Settings
from service.store import ResultStore

from live_server import serving
from test_service_fuzz import postgres_url  # noqa: F401 (the PostgreSQL server fixture)

pytestmark = pytest.mark.slow  # real uvicorn servers, a PostgreSQL server
SPEC = {"name": "slow-mlflow", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}
READERS = 45


@pytest.fixture
def hanging_mlflow(monkeypatch):
    """An `http://` tracking URI whose server accepts every connection and never answers."""
    # The blocked MLflow calls end (in their pool threads) soon after the test closes the socket.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")
    server = socket.create_server(("127.0.0.1", 0), backlog=512)
    server.settimeout(0.1)
    conns, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conns.append(server.accept()[0])
            except (TimeoutError, OSError):
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for c in [*conns, server]:
        c.close()


def _storm(base: str, exp_id: str) -> dict[str, list]:
    paths = [f"/experiments/{exp_id}", f"/experiments/{exp_id}/trials", f"/experiments/{exp_id}/results",
             "/experiments"]
    seen: dict[str, list] = {p: [] for p in paths}

    def read(i: int):
        path = paths[i % len(paths)]
        with httpx.Client(base_url=base, timeout=60) as client:
            r = client.get(path)
            seen[path].append((r.status_code, r.headers.get("retry-after"), r.json()))
    with httpx.Client(base_url=base, timeout=30) as client, ThreadPoolExecutor(READERS) as pool:
        futures = [pool.submit(read, i) for i in range(READERS)]
        health = client.get("/health")             # while the readers wait on MLflow
        posted = client.post("/experiments", json={**SPEC, "name": "slow-mlflow-2"})
        for f in futures:
            f.result()
    seen["health"], seen["post"] = [health], [posted]
    return seen


def _check(database_url: str, tracking_uri: str, tmp_path) -> None:
    settings = Settings(database_url=database_url, tracking_uri=tracking_uri, data_roots=[tmp_path],
                        pretrained_roots=[tmp_path], refresh_interval_s=0.0, mlflow_timeout_s=1.0,
                        max_active_experiments=100, _env_file=None)
    app = create_app(settings, runner=FakeRunner(FakeCluster()), store=ResultStore(tracking_uri))
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        sub = client.post("/experiments", json=SPEC)
        assert sub.status_code == 202, sub.text
        foreign = client.post("/experiments", json={**SPEC, "name": "other", "mlflow": {"experiment": "x"}})
        assert foreign.status_code == 503 and foreign.headers["retry-after"] == "1"
        assert "did not answer has_experiment within 1 s" in foreign.json()["detail"]
        seen = _storm(base, sub.json()["id"])
        assert seen["health"][0].status_code == 200 and seen["health"][0].json()["status"] == "ok"
        assert seen["post"][0].status_code == 202, seen["post"][0].text
        exp_id = sub.json()["id"]
        for path in (f"/experiments/{exp_id}", "/experiments"):      # the stored state answers
            assert {s for s, _, _ in seen[path]} == {200}, seen[path]
        for path in (f"/experiments/{exp_id}/trials", f"/experiments/{exp_id}/results"):  # only MLflow knows
            assert {(s, ra) for s, ra, _ in seen[path]} == {(503, "1")}, seen[path]
            assert all("MLflow tracking store did not answer" in body["detail"] for _, _, body in seen[path])
        assert client.get("/experiments").json()["total"] == 2
        assert client.get("/health").json()["status"] == "ok"


def test_a_hanging_mlflow_on_sqlite(tmp_path, hanging_mlflow):
    _check(f"sqlite:///{tmp_path}/state.db", hanging_mlflow, tmp_path)


def test_a_hanging_mlflow_on_postgres(postgres_url, tmp_path, hanging_mlflow):  # noqa: F811
    _check(postgres_url, hanging_mlflow, tmp_path)
