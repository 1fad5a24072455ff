"""How a process ended, in words: the one wording of the driver's end (embinit.sweep.guardian, its
supervisor) and of a local Ray process's (embinit.sweep.ray_runtime). A leaf: both import it."""

from __future__ import annotations

import signal


def how_ended(returncode: int) -> str:
    """How a process ended, from its exit status as `subprocess` gives it (negative: the signal's number)."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"
