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
