"""When Ray dies under `embinit run`: close the sweep's runs from the driver.

`embinit run` takes SIGTERM and SIGHUP as Ctrl-C (embinit.sweep.interrupt): Tune stops the trials, and
the sweep closes its runs as interrupted. But a SIGTERM sent to every process of a job (Slurm's scancel
and time limit, `systemctl stop`) also reaches the local Ray's GCS, raylet and workers, which exit (here
within ~10 s). (A signal to the command's process group no longer does: the driver and its Ray have a
group of their own, embinit.cli.supervise.) The driver's calls into Ray then
wait for them, and Ray's core worker ends the process (exit 1: "Failed to connect to GCS within 60
seconds", or sooner when it sees its raylet gone), sometimes before Python's handler has run at all:
the sweep's run and its trials' runs stayed RUNNING. (Ctrl-C, SIGINT to the group, does not reach them:
Ray's processes block SIGINT.) Ray may also die with no signal to the driver: the OOM killer takes the
raylet or the GCS, or Ray crashes. The driver then failed the same way (exit 1 after Tune's "Trial task
failed" traceback, ~13 s after the raylet's SIGKILL), its runs RUNNING.

So `embinit run` starts `watch`: a thread that learns of a stopping signal (`STOPS`) from the wakeup fd of
Python's signal handling (the driver's main thread may be inside Ray's C++ code, where no Python handler
runs, and Ray may end the process first), and watches whether the local Ray this process started keeps
its GCS and raylet (`ray_runtime.local_ray_lost`; a Ray stopped on purpose, a cluster joined by address
or a connection the caller owns are not watched). When they are gone and the sweep has not closed its
runs itself meanwhile, it runs the sweep's closer (registered with `closing`), through MLflow alone, then
the command's `farewell`, and ends the process: after a signal, the runs are interrupted and the exit
code is the signal's (143, 129); with none, they are FAILED with what died ("the local Ray's raylet died
(pid N, killed by SIGKILL)"), and the exit code is 1. Either way the trials' checkpoint folders are
kept, so running the spec again resumes them. Ray's core worker may still end the driver first (exit 1,
within ~60 ms of its raylet's death): then the command's supervisor closes the runs
(embinit.sweep.guardian). The sweep's own path and the watcher never close at the
same time: leaving `closing` waits while the watcher closes, and the watcher does nothing once the sweep
has left it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable

from embinit.sweep.hangup import say

# `close(how, error)`: the sweep was stopped by the signal `how` ("SIGTERM", "SIGHUP") when `error` is
# None, else it failed with `error` (what ended Ray)
Closer = Callable[[str, str | None], None]
Farewell = Closer   # what the command says then, the same way

STOPS = (signal.SIGTERM, signal.SIGHUP)   # the signals `embinit run` takes as Ctrl-C
RAY_LOST = "Ray lost"   # `how` when Ray died with no signal
POLL_S = 0.2
_closers: list[Closer] = []
_lock = threading.Lock()


@contextmanager
def closing(close: Closer) -> Iterator[None]:
    """While open, `close(how, error)` is what the watcher runs if Ray dies under the driver."""
    with _lock:
        _closers.append(close)
    try:
        yield
    finally:
        with _lock:   # waits while the watcher closes (it then ends the process)
            _closers.remove(close)


def watch(signals: int, farewell: Farewell | None = None, lost: Callable[[], str | None] | None = None,
          end: Callable[[], None] | None = None) -> threading.Event:
    """Start the watcher. `signals`: the read end of the pipe given to `signal.set_wakeup_fd`, where
    Python's C-level handler writes each signal's number as it arrives, even while the main thread is
    inside Ray's C++ code (where no Python handler runs: the driver may be killed by Ray before one does).
    When `lost()` (default: what ended the local Ray's GCS or raylet, None while they run) while a sweep
    is registered, it closes the sweep and calls `farewell`: with (the signal's name, None) and exits
    128 + its number when one of `STOPS` came, else it first calls `end()` (default: end what is left of
    the local Ray), then closes with (`RAY_LOST`, what `lost()` said) and exits 1. Returns the event that
    ends it (it closes `signals` then)."""
    if lost is None:
        from embinit.sweep.ray_runtime import end_lost_local_ray, local_ray_lost
        lost, end = local_ray_lost, end or end_lost_local_ray
    done = threading.Event()
    threading.Thread(target=_watch, args=(signals, farewell, lost, end or (lambda: None), done),
                     name="embinit-abandon", daemon=True).start()
    return done


def _watch(signals: int, farewell: Farewell | None, lost: Callable[[], str | None], end: Callable[[], None],
           done: threading.Event) -> None:
    stopped, tried = None, False
    try:
        while not done.wait(POLL_S):
            stopped = stopped or _came(signals)   # read on: the pipe must not fill
            what = None if tried else lost()
            if what and not stopped:   # a signal that killed Ray may reach the pipe a moment later
                time.sleep(POLL_S)
                stopped = _came(signals)
            if what:
                tried = True   # should it return, no sweep is open: its own path closes the runs
                if stopped:
                    _abandon(signal.Signals(stopped).name, None, 128 + stopped, farewell, done)
                else:
                    _abandon(RAY_LOST, what, 1, farewell, done, end)
    finally:
        os.close(signals)


def _came(fd: int) -> int | None:
    """The first of `STOPS` among the signal numbers written to `fd` since the last read."""
    try:
        return next((sig for sig in os.read(fd, 512) if sig in STOPS), None)
    except BlockingIOError:
        return None


def _abandon(how: str, error: str | None, code: int, farewell: Farewell | None, done: threading.Event,
             end: Callable[[], None] | None = None) -> None:
    with _lock:
        if not _closers or done.is_set():
            return   # no sweep is open (it closes its runs itself): its own path ends the process
        if end is not None:   # before the runs are closed: no trial trains on into them
            end()
        say(f"[embinit] Ray's processes ended with the driver ({how} reached them too): closing the sweep's "
            "MLflow runs from here" if error is None else
            f"[embinit] {error}: the sweep cannot go on; closing its MLflow runs from here")
        for close in [*reversed(_closers), *([farewell] if farewell else [])]:
            try:
                close(how, error)
            except Exception as e:   # the next one still runs; the process ends anyway
                say(f"[embinit] {type(e).__name__}: {e}")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):   # the terminal is gone (embinit.sweep.hangup)
                pass
        os._exit(code)   # the main thread waits on a GCS that is gone: nothing else would end it
