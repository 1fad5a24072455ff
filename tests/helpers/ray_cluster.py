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


def stop_cluster(temp_dir: str) -> None:
    procs = processes(temp_dir)
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=15)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
