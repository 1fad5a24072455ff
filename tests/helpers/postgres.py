"""Debian's PostgreSQL server binaries, for tests that start a server of their own."""

from __future__ import annotations

import os
import shutil
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
