"""When the SIGTERM that stops `embinit run` reached Ray as well: close the sweep's runs from the driver.

`embinit run` takes SIGTERM as Ctrl-C (embinit.sweep.interrupt): Tune stops the trials, and the sweep
closes its runs as interrupted. But a SIGTERM sent to the process group (`kill -- -PGID`, `timeout`) or
to every process of a job (Slurm's scancel and time limit, `systemctl stop`) also reaches the local
Ray's GCS, raylet and workers, which exit (here within ~10 s). The driver's calls into Ray then wait for
them, and Ray's core worker ends the process (exit 1: "Failed to connect to GCS within 60 seconds", or
sooner when it sees its raylet gone), sometimes before Python's handler has run at all: the sweep's run
and its trials' runs stayed RUNNING. (Ctrl-C, SIGINT to the group, does not reach them: Ray's processes
block SIGINT.)

So `embinit run` starts `watch`: a thread that learns of a SIGTERM from the wakeup fd of Python's
signal handling (the driver's main thread may be inside Ray's C++ code, where no Python handler runs, and
Ray may end the process first), then waits while the local Ray this process started keeps its GCS and
raylet (`ray_runtime.local_ray_lost`). When they are gone and the sweep has not closed its
runs itself meanwhile, it runs the sweep's closer (registered with `closing`), through MLflow alone, then
the command's `farewell` (what it says on an interrupt), and ends the process with the signal's exit code.
The sweep's own path and the watcher never close at the same time: leaving `closing` waits while the
watcher closes, and the watcher does nothing once the sweep has left it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable

Closer = Callable[[str], None]   # called with how the sweep was stopped ("SIGTERM")

POLL_S = 0.2
_closers: list[Closer] = []
_lock = threading.Lock()


@contextmanager
def closing(close: Closer) -> Iterator[None]:
    """While open, `close(how)` is what the watcher runs if Ray dies under the driver."""
    with _lock:
        _closers.append(close)
    try:
        yield
    finally:
        with _lock:   # waits while the watcher closes (it then ends the process)
            _closers.remove(close)


def watch(signals: int, farewell: Closer | None = None, lost: Callable[[], bool] | None = None) -> threading.Event:
    """Start the watcher. `signals`: the read end of the pipe given to `signal.set_wakeup_fd`, where
    Python's C-level handler writes each signal's number as it arrives, even while the main thread is
    inside Ray's C++ code (where no Python handler runs: the driver may be killed by Ray before one does).
    Once a SIGTERM came, when `lost()` (default: the local Ray's GCS or raylet is gone) while a sweep is
    registered, it closes the sweep, calls `farewell("SIGTERM")` and exits 143. Returns the event that
    ends it (it closes `signals` then)."""
    if lost is None:
        from embinit.sweep.ray_runtime import local_ray_lost
        lost = local_ray_lost
    done = threading.Event()
    threading.Thread(target=_watch, args=(signals, farewell, lost, done), name="embinit-abandon",
                     daemon=True).start()
    return done


def _watch(signals: int, farewell: Closer | None, lost: Callable[[], bool], done: threading.Event) -> None:
    terminated = tried = False
    try:
        while not done.wait(POLL_S):
            terminated = _came(signals, signal.SIGTERM) or terminated   # read on: the pipe must not fill
            if terminated and not tried and lost():
                _abandon("SIGTERM", 128 + signal.SIGTERM, farewell, done)
                tried = True   # it returned: no sweep is open, its own path closes the runs
    finally:
        os.close(signals)


def _came(fd: int, sig: int) -> bool:
    """Whether `sig` is among the signal numbers written to `fd` since the last read."""
    try:
        return sig in os.read(fd, 512)
    except BlockingIOError:
        return False


def _abandon(how: str, code: int, farewell: Closer | None, done: threading.Event) -> None:
    with _lock:
        if not _closers or done.is_set():
            return   # no sweep is open (it closes its runs itself): its own path ends the process
        print(f"[embinit] Ray's processes ended with the driver ({how} reached them too): closing the "
              "sweep's MLflow runs from here", file=sys.stderr, flush=True)
        for close in [*reversed(_closers), *([farewell] if farewell else [])]:
            try:
                close(how)
            except Exception as e:   # the next one still runs; the process ends anyway
                print(f"[embinit] {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)   # the main thread waits on a GCS that is gone: nothing else would end it
