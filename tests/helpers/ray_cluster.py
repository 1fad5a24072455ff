"""Ray processes a test starts itself on loopback addresses, and how it stops only those.

`ray stop` would also end other Ray clusters on the machine (another test's, a developer's), so a test
roots its cluster in its own temp dir, finds the processes by it and ends them by pid."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def processes(temp_dir: str) -> list[psutil.Process]:
    """The Ray processes of the cluster rooted at `temp_dir`, with their children."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in part for part in proc.info["cmdline"] or []):
                found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    found[child.pid] = child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [p for pid, p in found.items() if pid != os.getpid()]


def stop_cluster(temp_dir: str, grace_s: float = 15) -> None:
    """SIGTERM, then SIGKILL after `grace_s`, in the order `ray stop` keeps: the raylet first, then the
    other processes (agents, dashboard, monitors, workers), the GCS last. Terminated all at once, the
    raylet waits ~12 s on a GCS that is going away and the GCS outlives any grace period (then killed)."""
    procs = processes(temp_dir)

    def bucket(p: psutil.Process) -> int:
        try:
            cmd = " ".join(p.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return 1
        return 0 if "/raylet/raylet" in cmd else 2 if "/gcs/gcs_server" in cmd else 1

    order = {p.pid: bucket(p) for p in procs}
    for b in (0, 1, 2):
        _terminate([p for p in procs if order[p.pid] == b], grace_s)


def _terminate(procs: list[psutil.Process], grace_s: float) -> None:
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
