"""A real `embinit serve` (its own local Ray, in an empty folder): where it listens and what it does with
clients that stall (issue 20, items 3 and 5). One server for the module; slow: it starts Ray."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from live_server import free_port

ROOT = Path(__file__).resolve().parents[1]
HEADER_TIMEOUT_S = 2.0

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base URL, the server's process) of `embinit serve` with a 2 s header timeout."""
    folder = tmp_path_factory.mktemp("serve")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "EMBINIT_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S), "EMBINIT_CACHE_DIR": str(folder / "cache")}
    for name in ("RAY_AUTH_MODE", "EMBINIT_RAY_ADDRESS", "RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        env.pop(name, None)   # as a newcomer starts it
    proc = subprocess.Popen([sys.executable, "-m", "embinit", "serve", "--port", str(port), "--log-level",
                             "warning"], cwd=folder, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(folder / "serve.log", "wb"), start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"embinit serve did not start: {(folder / 'serve.log').read_text()[-3000:]}")
        time.sleep(0.5)
    try:
        yield base, psutil.Process(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)   # the server and its Ray: our own process group
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _listening(root: psutil.Process) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket of `root` and its descendants."""
    out = []
    for p in [root, *root.children(recursive=True)]:
        try:
            out += [(p.name(), c.laddr.ip, c.laddr.port) for c in p.net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def test_the_local_ray_listens_on_the_loopback_only(served):
    _, server = served
    sockets = _listening(server)
    names = {name for name, _, _ in sockets}
    assert "gcs_server" in names and "raylet" in names, sockets   # Ray's processes are seen
    exposed = [s for s in sockets if not _loopback(s[1])]
    assert exposed == [], f"listening beyond the loopback: {exposed}"


def test_half_sent_headers_are_closed_within_the_header_timeout(served):
    base, _ = served
    port = int(base.rsplit(":", 1)[1])
    stalled = []
    for i in range(60):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i % 10:   # most send half a request; every tenth sends nothing at all
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        stalled.append(s)
    opened = time.monotonic()
    assert httpx.get(base + "/health", timeout=5).status_code == 200   # others are still served
    closed_after = []
    for s in stalled:
        s.settimeout(max(0.1, opened + HEADER_TIMEOUT_S + 5 - time.monotonic()))
        try:
            data = s.recv(1024)
        except TimeoutError:
            data = None          # still open past the deadline
        except ConnectionResetError:
            data = b""
        closed_after.append(time.monotonic() - opened if data == b"" else None)
        s.close()
    assert None not in closed_after, f"{closed_after.count(None)} of 60 stalled connections still open"
    assert max(closed_after) < HEADER_TIMEOUT_S + 5
    assert min(closed_after) >= HEADER_TIMEOUT_S - 0.5   # not closed before their time


def test_a_slow_but_steady_request_is_served(served):
    """The deadline is on the whole head, from its first byte; a client that finishes in time is served."""
    base, _ = served
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(HEADER_TIMEOUT_S / 2)
        s.sendall(b"Host: x\r\nConnection: close\r\n\r\n")
        assert s.recv(1024).startswith(b"HTTP/1.1 200")


def test_experiments_run_on_the_loopback_ray(served):
    """Drivers and trials still start and report on a Ray that listens on the loopback alone."""
    base, _ = served
    spec = {"name": "loopback", "tasks": [{"task": "synthetic_lm", "epochs": 1, "max_train_examples": 32,
                                           "d_model": 16, "layers": 1, "ff_dim": 16}],
            "inits": ["xavier"], "seeds": 1, "resources": {"cpus": 1}}
    r = httpx.post(base + "/experiments", json=spec, timeout=60)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 300
    while (state := httpx.get(base + r.json()["status_url"], timeout=30).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, state
        time.sleep(2)
    assert state["status"] == "succeeded", state
