"""Ctrl-C during a sweep: the first one stops the running trials cleanly (as a cancel does) and the sweep
then ends with KeyboardInterrupt, so its unfinished trials are recorded as `interrupted`; a second one
quits at once. Tune's own SIGINT handler is off (`TUNE_DISABLE_SIGINT_HANDLER`, set by `default_env`):
it would end the run with a `Tuner.restore` hint, while embinit resumes by running the spec again."""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def stop_on_interrupt(stream=None) -> Iterator[Callable[[], bool]]:
    """Yields `interrupted()`; raises KeyboardInterrupt on exit when Ctrl-C came. Outside the main thread
    (a service driver) signals cannot be caught, and nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    fired = threading.Event()
    previous = signal.getsignal(signal.SIGINT)

    def handler(_sig, _frame):
        fired.set()
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C quits at once
        print("\n[embinit] interrupted: stopping the running trials (Ctrl-C again to quit at once)",
              file=stream or sys.stderr, flush=True)

    signal.signal(signal.SIGINT, handler)
    try:
        yield fired.is_set
    finally:
        if signal.getsignal(signal.SIGINT) is handler:
            signal.signal(signal.SIGINT, previous)
    if fired.is_set():
        raise KeyboardInterrupt
