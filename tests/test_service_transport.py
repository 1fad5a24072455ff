"""The API behind a real HTTP server (uvicorn in a thread, fake Ray and MLflow): a body that arrives too
slowly is answered 408 within the body timeout, and a client that disconnects mid-upload is no
unhandled error (no traceback in the log). Raw sockets, because HTTP clients do not misbehave."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest
import uvicorn

from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.main import create_app
from service.settings import Settings


@pytest.fixture
def server(tmp_path):
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        data_roots=[tmp_path], pretrained_roots=[tmp_path], body_timeout_s=1.0, _env_file=None)
    cluster = FakeCluster()
    app = create_app(settings, runner=FakeRunner(cluster), store=FakeStore(cluster))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)
    yield port
    srv.should_exit = True
    thread.join(10)


def _request(declared: int, sent: bytes) -> bytes:
    return (f"POST /experiments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {declared}\r\n\r\n").encode() + sent


def _read_until_closed(s: socket.socket) -> bytes:
    chunks = []
    while chunk := s.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_slow_body_is_answered_408_within_the_timeout(server):
    with socket.create_connection(("127.0.0.1", server), timeout=15) as s:
        t0 = time.monotonic()
        s.sendall(_request(1000, b"{"))
        answer = _read_until_closed(s)   # headers and body may come in separate packets
        waited = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"did not arrive within 1.0 s" in answer
    assert waited < 10, waited   # the connection is not held open for long (the timeout is 1 s)


def test_a_client_disconnecting_mid_upload_is_not_an_unhandled_error(server, caplog):
    caplog.set_level(logging.INFO)
    with socket.create_connection(("127.0.0.1", server), timeout=5) as s:
        s.sendall(_request(1000, b'{"name": '))
        time.sleep(0.2)
    time.sleep(0.5)
    with socket.create_connection(("127.0.0.1", server), timeout=5) as s:  # the server still answers
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], \
        [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.exc_info]
