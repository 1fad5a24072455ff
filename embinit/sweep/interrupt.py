"""Ctrl-C during a sweep: the first one stops the running trials cleanly (as a cancel does) and the sweep
then ends with KeyboardInterrupt (`Interrupted`), so its unfinished trials are recorded as `interrupted`;
a second one quits at once. Tune's own SIGINT handler is off (`TUNE_DISABLE_SIGINT_HANDLER`, set by
`default_env`): it would end the run with a `Tuner.restore` hint, while embinit resumes by running the
spec again.

`embinit run` also takes SIGTERM (`kill`, a container stop, a scheduler's time limit) and SIGHUP (the ssh
connection dropped, the terminal window closed) as Ctrl-C (`terminate_as_interrupt`): without it Ray's
crash handler aborts the process on SIGTERM, SIGHUP's default ends it at once, and the sweep's runs stay
RUNNING. After a hangup the terminal is gone: the streams that were it are pointed at /dev/null first
(embinit.sweep.hangup), so no message about the close can crash it. Only the command line installs it; a
service's driver runs its sweep in a thread (no signal reaches it there) and stops it through
`run_sweep(stop=...)`. The command runs this in a driver process that its supervisor passes the signals
on to (embinit.cli.supervise). A signal that reached the local Ray's processes as well (sent to every
process of a job), and Ray dying under the driver with no signal at all, are embinit.sweep.abandon's."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from embinit.sweep import abandon, hangup
from embinit.tracking.records import RERUN_RESUMES


class Interrupted(KeyboardInterrupt):
    """The sweep was stopped by `how`: "Ctrl-C" or a signal's name ("SIGTERM", "SIGHUP")."""

    def __init__(self, how: str = "Ctrl-C"):
        super().__init__(how)
        self.how = how


def how_interrupted(e: KeyboardInterrupt) -> str:
    """"Ctrl-C", or the signal that stood for it (a plain KeyboardInterrupt: Ctrl-C)."""
    return getattr(e, "how", "Ctrl-C")


def interrupted_reason(how: str = "Ctrl-C") -> str:
    """What an interrupted sweep's run and its stopped trials say (`how`: Ctrl-C, SIGTERM, SIGHUP)."""
    return f"interrupted ({how}); {RERUN_RESUMES}"


def signal_name(sig: int) -> str:
    """"Ctrl-C" for SIGINT, else the signal's name ("SIGTERM")."""
    return "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name


@contextmanager
def stop_on_interrupt(stream=None) -> Iterator[Callable[[], bool]]:
    """Yields `interrupted()`; raises `Interrupted` on exit when Ctrl-C (or SIGTERM, see
    `terminate_as_interrupt`) came. Outside the main thread (a service driver) signals cannot be caught,
    and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    fired: list[str] = []
    previous = signal.getsignal(signal.SIGINT)

    def handler(sig, _frame):
        fired.append(signal_name(sig))
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C quits at once
        hangup.say(f"\n[embinit] interrupted ({fired[0]}): stopping the running trials ({fired[0]} again to quit "
                   "at once)", stream)

    signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: bool(fired)
    finally:
        if signal.getsignal(signal.SIGINT) is handler:
            signal.signal(signal.SIGINT, previous)
    if fired:
        raise Interrupted(fired[0])


@contextmanager
def terminate_as_interrupt(farewell: abandon.Farewell | None = None) -> Iterator[Callable[[], str | None]]:
    """While it is open, SIGTERM and SIGHUP do what Ctrl-C does: they go to the SIGINT handler in force
    (during training `stop_on_interrupt`'s: the trials stop, are recorded as interrupted and the sweep's
    run is closed), else raise `Interrupted("SIGTERM")` (or "SIGHUP"). A SIGHUP first points the streams
    that were the terminal at /dev/null. A signal ignored when it opens (SIGHUP under `nohup`) stays
    ignored. Yields `terminated()`: the name of the first of them that came,
    else None. For the command line only (see the module's note); outside the main thread it changes
    nothing. `RayRuntime` puts them back after `ray.init`, which installs its own SIGTERM handler.
    Meanwhile `abandon.watch` runs: should Ray die under the driver (killed by the signal with it, or
    with none), the sweep's runs are closed from there, `farewell(how, error)` says what the command
    says, and the process exits."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    fired: list[str] = []
    terminal = hangup.terminal_fds()

    def handler(sig, frame):
        if sig == signal.SIGHUP:
            hangup.detach(terminal)   # before anything is said: the terminal is gone
        fired.append(signal_name(sig))
        current = signal.getsignal(signal.SIGINT)
        if callable(current) and current is not signal.default_int_handler:
            current(sig, frame)
        else:   # no sweep is training (or a second signal): stop where the program is
            raise Interrupted(signal_name(sig))

    # an ignored one stays ignored: `nohup embinit run` (SIGHUP ignored) trains on after the terminal closes
    previous = {sig: signal.signal(sig, handler) for sig in abandon.STOPS
                if signal.getsignal(sig) is not signal.SIG_IGN}
    read, write = os.pipe()   # the signals as they arrive, for the watcher (abandon.watch)
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    watching = abandon.watch(read, farewell)
    try:
        yield lambda: fired[0] if fired else None
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)
        signal.set_wakeup_fd(previous_fd)
        os.close(write)
        watching.set()   # the watcher closes `read`
