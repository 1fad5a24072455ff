"""Ray's agents are stopped with the API (issue 20, item 10): an API process that started a local Ray is
killed with SIGKILL; every process it had started is gone within seconds (before: `ray::DashboardAgent`
and `ray::RuntimeEnvAgent` lived on for a minute), including one that was never the API's descendant
when the reaper looked (on a loaded machine the agents started less than a note before the kill)."""

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

# An API that starts a process and loses it as a child at once (its parent exits, init adopts it), as
# the raylet's agents are lost when the raylet dies with the API: never in a note of its descendants.
ORPHANING_API = """
import subprocess, sys, time
from service import ray_reaper
ray_reaper.start()
child = "import subprocess as s; print(s.Popen(['sleep', '600'], stdout=s.DEVNULL, stderr=s.DEVNULL).pid)"
mid = subprocess.run([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, check=True)
print(mid.stdout.strip(), flush=True)
time.sleep(600)
"""

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


def test_a_process_the_api_started_goes_with_it_though_no_longer_its_descendant():
    api = subprocess.Popen([sys.executable, "-c", ORPHANING_API], stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    orphan = None
    try:
        orphan = int(api.stdout.readline())
        started = Path(f"/proc/{orphan}/stat").read_text().rsplit(")", 1)[1].split()[19]
        assert orphan not in descendants(api.pid)   # what the reaper's note alone cannot see
    finally:
        api.send_signal(signal.SIGKILL)
        api.wait()
    deadline = time.monotonic() + 15
    while _alive({orphan: started}) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _alive({orphan: started})
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []


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
        # killed at once: the agents may be younger than the reaper's last note (its mark finds them)
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
