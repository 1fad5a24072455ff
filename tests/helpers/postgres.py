"""Debian's PostgreSQL server binaries, for tests that start a server of their own."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def pg_bin() -> Path | None:
    """The folder of `pg_ctl`, `initdb`, `postgres`, `psql`; None when no server is installed."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return versions[-1].parent if versions else None


def as_postgres_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run it as the `postgres` user the Debian package creates."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def local_server() -> Iterator[str]:
    """A throwaway PostgreSQL server on a free loopback port; yields its URL (database `postgres`, user
    `embinit`, no password). Callers skip first when `pg_bin()` is None."""
    pg = pg_bin()
    assert pg is not None, "no PostgreSQL server installed (apt-get install postgresql)"
    data = Path(tempfile.mkdtemp(prefix="embinit-pg-"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def run(*cmd: str) -> None:
        subprocess.run(as_postgres_user([str(pg / cmd[0]), *cmd[1:]]), check=True, capture_output=True,
                       timeout=120)
    run("initdb", "-D", str(data / "db"), "-U", "embinit", "--auth=trust", "-E", "UTF8")
    run("pg_ctl", "-D", str(data / "db"), "-l", str(data / "log"), "-w", "start",
        "-o", f"-h 127.0.0.1 -p {port} -k {data} -F")
    try:
        yield f"postgresql+psycopg://embinit@127.0.0.1:{port}/postgres"
    finally:
        run("pg_ctl", "-D", str(data / "db"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def local_server_or_skip() -> Iterator[str]:
    """`local_server`, or the calling test skipped with the reason when no server is installed."""
    import pytest
    if pg_bin() is None:
        pytest.skip("no PostgreSQL server installed (apt-get install postgresql)")
    with local_server() as url:
        yield url
