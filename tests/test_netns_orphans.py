"""The cluster harness (tests/helpers/netns_cluster.py) removes what a killed test run left: a run killed
by a signal runs neither its fixture's teardown nor `atexit`, so its namespaces and servers lived on."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from helpers.netns import ip, namespace_pids, namespaces_usable
from helpers.netns_cluster import OWNER, PREFIX, remove_orphans


def _fake_cluster(owner: int | None) -> tuple[str, subprocess.Popen]:
    """A namespace `<prefix>-head` with a process in it, and the cluster's folder naming `owner`."""
    prefix = f"{PREFIX}{secrets.token_hex(3)}"
    (Path("/tmp") / prefix).mkdir()
    if owner is not None:
        (Path("/tmp") / prefix / OWNER).write_text(str(owner))
    ip("netns", "add", f"{prefix}-head")
    server = subprocess.Popen(["ip", "netns", "exec", f"{prefix}-head", "sleep", "300"])
    deadline = time.monotonic() + 10
    while not namespace_pids(f"{prefix}-head") and time.monotonic() < deadline:
        time.sleep(0.05)
    return prefix, server


def _gone(prefix: str) -> bool:
    return f"{prefix}-head" not in ip("netns", "list").stdout and not (Path("/tmp") / prefix).exists()


def test_a_cluster_whose_owner_died_is_removed_and_a_live_ones_is_kept():
    why = namespaces_usable()
    if why:
        pytest.skip(why)
    dead = subprocess.Popen(["true"])
    dead.wait()
    made = [_fake_cluster(dead.pid), _fake_cluster(os.getpid()), _fake_cluster(None)]
    (orphan, orphan_server), (live, live_server), (starting, starting_server) = made
    try:
        removed = remove_orphans()
        assert orphan in removed and live not in removed and starting not in removed, removed
        assert _gone(orphan) and orphan_server.wait(timeout=10) != 0      # its server was killed
        assert not _gone(live) and live_server.poll() is None
        assert not _gone(starting)           # no owner written yet: a cluster being made, left alone
        old = time.time() - 600
        os.utime(Path("/tmp") / starting, (old, old))
        assert starting in remove_orphans() and _gone(starting)          # ... unless it is long past making
    finally:
        for prefix, server in made:
            server.kill()
            subprocess.run(["ip", "netns", "del", f"{prefix}-head"], capture_output=True)
            subprocess.run(["rm", "-rf", f"/tmp/{prefix}"])
