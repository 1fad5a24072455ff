"""Ray processes a test starts itself on loopback addresses, and how it stops only those.

`ray stop` would also end other Ray clusters on the machine (another test's, a developer's), so a test
roots its cluster in its own temp dir, finds the processes by it and ends them by pid."""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def write_token(folder: str) -> str:
    """A fresh Ray auth token in a new file `auth_token` under `folder`, readable by its owner alone (0600
    from its creation); returns its path."""
    path = os.path.join(folder, "auth_token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def token_env(token: str) -> dict[str, str]:
    """This process's environment for a Ray process of a token-auth cluster whose token is in file `token`
    (any other auth setting of the environment left out)."""
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    return {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token, "RAY_USAGE_STATS_ENABLED": "0"}


def refresh_ray_auth() -> None:
    """Make this process's Ray read its auth settings from the environment again: it keeps the mode (in
    its RayConfig) and the token (its loader's cache) from when it first read them. The config first, as
    Ray's own tests do: a core-worker thread still draining would otherwise reload a token that is gone."""
    from ray._raylet import AuthenticationTokenLoader, Config
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@contextmanager
def token_auth_here(token: str) -> Iterator[None]:
    """While open, this process (its Ray drivers: an API, `ray.init(address=...)`) uses token auth with
    the token in file `token`; afterwards its environment's auth and usage-stats variables are as before,
    and its Ray reads them again. Ray's auth state is process-wide, and later tests in the process start
    local Rays that count on auth being off or unset (embinit.sweep.ray_runtime.default_env only sets it
    when unset). No Ray may be connected from this process when it opens or closes."""
    names = (*AUTH_VARS, "RAY_USAGE_STATS_ENABLED")
    before = {k: os.environ.get(k) for k in names}
    for k in AUTH_VARS:
        os.environ.pop(k, None)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=token, RAY_USAGE_STATS_ENABLED="0")
    refresh_ray_auth()
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        refresh_ray_auth()


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
