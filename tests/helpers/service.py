"""The real API app over a fake cluster, as the service tests open it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient

from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.main import create_app
from service.settings import Settings


@contextmanager
def app_clients(cluster: FakeCluster) -> Iterator[Callable[[Settings], TestClient]]:
    """Yields `open(settings) -> TestClient` (the app started, lifespan included); every client opened
    is closed on exit."""
    clients: list[TestClient] = []

    def open_client(settings: Settings) -> TestClient:
        client = TestClient(create_app(settings, runner=FakeRunner(cluster), store=FakeStore(cluster)))
        client.__enter__()
        clients.append(client)
        return client
    try:
        yield open_client
    finally:
        for c in clients:
            c.__exit__(None, None, None)


@contextmanager
def rooted_clients(tmp_path, cluster: FakeCluster) -> Iterator[Callable[..., TestClient]]:
    """Yields `open(**setting_overrides) -> TestClient`: SQLite state and MLflow in `tmp_path`, with a
    data root and a pretrained root made there (the hostile-input and security tests)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "pretrained").mkdir()
    values = dict(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                  data_roots=[tmp_path / "data"], pretrained_roots=[tmp_path / "pretrained"],
                  refresh_interval_s=0.0, _env_file=None)
    with app_clients(cluster) as open_client:
        yield lambda **overrides: open_client(Settings(**{**values, **overrides}))


def problems(response) -> dict[str, str]:
    """A 422's problems: field path -> message."""
    assert response.status_code == 422, response.text
    return {p["loc"]: p["msg"] for p in response.json()["detail"]}


def nothing_stored(client) -> bool:
    return client.get("/experiments").json()["total"] == 0
