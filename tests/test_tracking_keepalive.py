"""A tracking server whose every kept-alive request waits ~40 ms (uvicorn's multi-process mode leaves
Nagle on, Kludex/uvicorn#3149; `mlflow server`'s default is 4 workers) is named once, with the fix, when
a sweep starts; a one-process server gives no warning, and one that cannot be reached for the check's
patience is an error naming it."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest
import requests
from live_server import free_port

from embinit.tracking import server_check as tracking_server

APP = '''
async def app(scope, receive, send):
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"OK"})
'''


@pytest.fixture
def uvicorn_server(tmp_path):
    """`start(workers)`: a minimal ASGI app under `uvicorn --workers N`, as `mlflow server` runs MLflow's
    app; returns its URL."""
    (tmp_path / "tinyapp.py").write_text(APP)
    procs = []

    def start(workers: int) -> str:
        port = free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "uvicorn", "tinyapp:app", "--host", "127.0.0.1",
                                       "--port", str(port), "--workers", str(workers), "--log-level", "warning"],
                                      cwd=tmp_path, start_new_session=True))
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                requests.get(url + "/health", timeout=1).raise_for_status()
                return url
            except requests.RequestException:
                time.sleep(0.2)
        raise AssertionError(f"uvicorn --workers {workers} did not answer in 60 s")
    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(30)


def test_the_warning_needs_every_kept_alive_request_slow_and_the_first_fast():
    assert "--workers 1" in tracking_server.keepalive_warning("http://m:5000", 1.2, [44.0, 43.8, 44.1])
    assert tracking_server.keepalive_warning("http://m:5000", 1.2, [44.0, 3.0, 44.1]) is None  # one fast
    assert tracking_server.keepalive_warning("http://m:5000", 90.0, [45.0, 44.0]) is None     # far away
    assert tracking_server.keepalive_warning("http://m:5000", 1.0, [2.0, 1.5]) is None
    assert tracking_server.check("sqlite:///mlflow.db") is None                                # no server


def test_a_multi_worker_server_is_named_with_the_fix_and_a_one_worker_server_is_not(uvicorn_server, caplog):
    caplog.set_level(logging.WARNING, logger="embinit.tracking")
    slow = uvicorn_server(2)
    message = tracking_server.check(slow)
    assert message is not None and "Kludex/uvicorn#3149" in message and "--workers 1" in message
    assert message in caplog.text
    fast = uvicorn_server(1)
    assert tracking_server.check(fast) is None


def test_a_sweep_checks_its_tracking_server_before_it_writes_anything(uvicorn_server, monkeypatch, caplog):
    """`run_sweep` against a server that stalls kept-alive requests logs the warning, then goes on to the
    store (stopped here, at the experiment)."""
    from embinit.sweep import run as sweep_run
    caplog.set_level(logging.WARNING, logger="embinit.tracking")
    monkeypatch.setattr(sweep_run.mlflow_store, "ensure_experiment",
                        lambda *a: (_ for _ in ()).throw(RuntimeError("stop here")))
    spec = {"name": "keepalive", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}
    with pytest.raises(RuntimeError, match="stop here"):
        sweep_run.run_sweep(spec, tracking_uri=uvicorn_server(2))
    assert "Kludex/uvicorn#3149" in caplog.text


def test_a_sweep_against_a_server_that_is_not_there_fails_at_once_naming_it(monkeypatch):
    """MLflow's client retried a tracking URI where no server listens for minutes, saying nothing, before
    the sweep's first call failed: `embinit run --tracking-uri http://127.0.0.1:1` sat silent. The check
    names the server and the fix, before anything is written."""
    from embinit.errors import EmbinitError
    from embinit.sweep import run as sweep_run
    monkeypatch.setattr(sweep_run.mlflow_store, "ensure_experiment",
                        lambda *a: (_ for _ in ()).throw(AssertionError("the store was opened")))
    uri = f"http://127.0.0.1:{free_port()}"
    spec = {"name": "keepalive", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}
    t = time.monotonic()
    with pytest.raises(EmbinitError) as e:
        sweep_run.run_sweep(spec, tracking_uri=uri)
    assert str(e.value) == (f"the MLflow server {uri} cannot be reached ([Errno 111] Connection refused, tried for "
                            f"10 s); start it "
                            f"(e.g. `mlflow server --backend-store-uri sqlite:///mlflow.db --workers 1`) or give the "
                            f"URI of one that runs (--tracking-uri, the spec's mlflow.tracking_uri)")
    assert time.monotonic() - t < 30


def test_a_server_that_comes_up_within_the_patience_is_used(tmp_path):
    """A server restarting while an experiment starts (the API's driver, a CLI run) is waited for a few
    seconds, not failed at once: the check goes on once it answers."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *a):
            pass

    port = free_port()
    servers = []

    def start_later():
        time.sleep(2.0)
        servers.append(HTTPServer(("127.0.0.1", port), Health))
        servers[0].serve_forever()
    threading.Thread(target=start_later, daemon=True).start()
    t = time.monotonic()
    try:
        assert tracking_server.check(f"http://127.0.0.1:{port}", patience_s=20) is None
        assert time.monotonic() - t >= 2.0
    finally:
        if servers:
            servers[0].shutdown()
