"""Ray's agents are stopped with the API (issue 20, item 10): an API process that started a local Ray is
killed with SIGKILL; every process it had started is gone within seconds (before: `ray::DashboardAgent`
and `ray::RuntimeEnvAgent` lived on for a minute)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from service.ray_reaper import descendants

# The API's Ray side: a RayRunner that starts a local Ray, as `embinit serve` does.
API = """
import time
from service.runner import RayRunner
RayRunner().connect()
print("up", flush=True)
time.sleep(600)
"""


def _alive(procs: dict[int, str]) -> list[int]:
    out = []
    for pid, started in procs.items():
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19] == started:
                out.append(pid)
        except OSError:
            pass
    return out


@pytest.mark.slow  # starts a local Ray
def test_a_killed_api_takes_its_local_ray_along():
    tmp = tempfile.mkdtemp(prefix="rr-")   # short: Ray's socket paths must fit in 107 bytes
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": tmp}  # its own Ray, not one found in /tmp/ray
    api = subprocess.Popen([sys.executable, "-c", API], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert api.stdout.readline().strip() == "up"
        deadline, names = time.monotonic() + 60, set()
        while not {"ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= names and time.monotonic() < deadline:
            time.sleep(0.5)   # the raylet starts its agents after ray.init returns
            procs = descendants(api.pid)
            names = {Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode().strip()
                     for p in _alive(procs)}
        assert {"ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= names, names
        time.sleep(1.5)       # the reaper notes the API's processes every second
    finally:
        api.send_signal(signal.SIGKILL)
        api.wait()
    deadline = time.monotonic() + 15   # well under the minute the agents lived on their own
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _alive(procs)
    for pid in left:   # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert left == []
