"""After a hangup the terminal is gone: what `embinit run` still says must not crash it.

When the ssh connection drops or the terminal window closes, `embinit run` gets SIGHUP (and closes its
sweep as interrupted, embinit.sweep.interrupt), but its terminal is gone: a write to it fails with EIO,
and a pipe whose reader died with the session (`| tee log`) with EPIPE. An uncaught one would turn the
orderly close into a crash that leaves runs RUNNING or FAILED; one left in stdout's buffer makes Python
exit 120 at shutdown. So on SIGHUP the standard streams that were the terminal are pointed at /dev/null
(`detach`, what nohup does before the fact), and the interrupt's messages go through `say`, which drops
what cannot be written.
"""

from __future__ import annotations

import os
import sys

STANDARD_FDS = (0, 1, 2)


def terminal_fds() -> tuple[int, ...]:
    """The standard streams that are a terminal now: after a hangup `isatty` can no longer tell (EIO)."""
    return tuple(fd for fd in STANDARD_FDS if os.isatty(fd))


def detach(fds: tuple[int, ...]) -> None:
    """Point `fds` (the terminal's, `terminal_fds`) at /dev/null: later writes succeed and are dropped."""
    if not fds:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            os.dup2(null, fd)
    finally:
        os.close(null)


def say(text: str, stream=None) -> None:
    """Print `text` and flush (to stderr by default); a stream that is gone (EIO, EPIPE) drops it."""
    try:
        print(text, file=stream or sys.stderr, flush=True)
    except (OSError, ValueError):   # ValueError: the stream was closed
        pass
