"""Who holds a lease (the API's on its state database, a sweep's on a trial key): `host:pid`, and
whether such a holder is a process of this host that no longer runs, so its lease can be taken over at
once instead of after its TTL."""

from __future__ import annotations

import os
import socket


def holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_gone(holder: str) -> bool:
    """Whether the holder is a process of this host that no longer runs (a crashed API restarted at once
    need not wait for the TTL)."""
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
