"""Every MLflow read of the API, with a time limit: a slow or absent tracking server costs a reader at most
`mlflow_timeout_s` (then 503 with `Retry-After`), never a stuck worker thread or a state-database
connection.

The calls run in threads of their own (at most `mlflow_max_concurrency` at once), so hung calls cannot take
the threads that serve `/health` or the database. A call that does not get a slot, or whose answer does not
come, within the limit raises `StoreUnavailable`; the call itself cannot be interrupted (the MLflow
client blocks in a socket), and keeps its slot until it finishes or fails (an `http://` store: within
MLflow's own `MLFLOW_HTTP_REQUEST_TIMEOUT` and retries). Callers must not hold a
database session across these calls (`service.state` and the routes release theirs first).

Identical reads share one call (single flight): a request for a read already in flight (the same method
and arguments) waits for that call's answer instead of starting another. Without it, pollers of a large
experiment (`/trials`, `/results` read every run) each started a full read every few seconds; past the
time limit the given-up reads piled up, took the CPU and the store's read lock, and the sweep's own
writes starved (bench/bench_control_plane.py: a 10,000-trial sweep stalled at 5,106 trials).
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable

from embinit.task_registry import scoped

# The store's methods that talk to MLflow; the rest (`tracking_uri`, `prepare`) pass through.
GUARDED = ("counts", "close_orphans", "has_experiment", "experiment_id", "trials", "report")
SHARED = ("counts", "has_experiment", "experiment_id", "trials", "report")   # reads: one call answers all


class StoreUnavailable(Exception):
    """The MLflow tracking store did not answer in time (the API answers 503 with `Retry-After`)."""

    def __init__(self, what: str, timeout_s: float):
        super().__init__(f"the MLflow tracking store did not answer {what} within {timeout_s:g} s; "
                         f"retry later")
        self.retry_after_s = max(1, round(timeout_s))


class GuardedStore:
    """Wraps a `ResultStore` (or a fake): its MLflow reads get a time limit and a bounded pool."""

    def __init__(self, store, timeout_s: float, max_concurrency: int = 8):
        self.inner, self.timeout_s = store, timeout_s
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._lock = threading.Lock()
        self._inflight: dict[Any, Future] = {}   # (method, args) -> the call answering it

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if name in GUARDED and callable(value):
            return lambda *args, **kwargs: self.call(name, lambda: value(*args, **kwargs),
                                                     key=_key(name, args, kwargs) if name in SHARED else None)
        return value

    def call(self, what: str, fn: Callable[[], Any], key: Any = None) -> Any:
        """`fn()` in a thread of its own; `StoreUnavailable` when no slot frees up or no answer comes in
        time. The thread is a daemon: a call blocked in MLflow never holds up the process's exit. With a
        `key`, a caller finding the same key in flight waits for that call instead (one slot for both)."""
        with self._lock:
            shared = self._inflight.get(key) if key is not None else None
        future, joined = (shared, True) if shared is not None else self._start(what, fn, key)
        try:
            answer = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            raise StoreUnavailable(what, self.timeout_s) from None
        return copy.deepcopy(answer) if joined else answer   # each caller its own copy

    def _start(self, what: str, fn: Callable[[], Any], key: Any) -> tuple[Future, bool]:
        """(the call's future, whether it was already in flight)."""
        if not self._slots.acquire(timeout=self.timeout_s):
            raise StoreUnavailable(what, self.timeout_s)
        with self._lock:
            shared = self._inflight.get(key) if key is not None else None
            if shared is not None:       # another caller started it while this one waited for a slot
                self._slots.release()
                return shared, True
            future: Future = Future()
            if key is not None:
                self._inflight[key] = future

        def work() -> None:
            try:
                with scoped():   # the tasks its reads' configs define are its own (embinit.task_registry)
                    future.set_result(fn())
            except BaseException as e:  # handed to the caller
                future.set_exception(e)
            finally:
                with self._lock:
                    if key is not None and self._inflight.get(key) is future:
                        del self._inflight[key]
                self._slots.release()  # the slot frees when the call ends, answered in time or not
        try:
            threading.Thread(target=work, daemon=True, name=f"embinit-mlflow-{what}").start()
        except BaseException:
            with self._lock:
                self._inflight.pop(key, None)
            self._slots.release()
            raise
        return future, False


def _key(name: str, args: tuple, kwargs: dict) -> Any:
    """What makes two reads the same read, or None when an argument is unhashable (no sharing)."""
    key = (name, args, tuple(sorted(kwargs.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key
