"""Every MLflow read of the API, with a time limit: a slow or absent tracking server costs a reader at most
`mlflow_timeout_s` (then 503 with `Retry-After`), never a stuck worker thread or a state-database
connection.

The calls run in threads of their own (at most `mlflow_max_concurrency` at once), so hung calls cannot take
the threads that serve `/health` or the database. A call that does not get a slot, or whose answer does not
come, within the limit raises `StoreUnavailable`; the call itself cannot be interrupted (the MLflow
client blocks in a socket), and keeps its slot until it finishes or fails (an `http://` store: within
MLflow's own `MLFLOW_HTTP_REQUEST_TIMEOUT` and retries). Callers must not hold a
database session across these calls (`service.state` and the routes release theirs first).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable

# The store's methods that talk to MLflow; the rest (`tracking_uri`, `prepare`) pass through.
GUARDED = ("counts", "close_orphans", "has_experiment", "experiment_id", "trials", "report")


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

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if name in GUARDED and callable(value):
            return lambda *args, **kwargs: self.call(name, lambda: value(*args, **kwargs))
        return value

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        """`fn()` in a thread of its own; `StoreUnavailable` when no slot frees up or no answer comes in
        time. The thread is a daemon: a call blocked in MLflow never holds up the process's exit."""
        if not self._slots.acquire(timeout=self.timeout_s):
            raise StoreUnavailable(what, self.timeout_s)
        future: Future = Future()

        def work() -> None:
            try:
                future.set_result(fn())
            except BaseException as e:  # handed to the caller
                future.set_exception(e)
            finally:
                self._slots.release()  # the slot frees when the call ends, answered in time or not
        try:
            threading.Thread(target=work, daemon=True, name=f"embinit-mlflow-{what}").start()
        except BaseException:
            self._slots.release()
            raise
        try:
            return future.result(timeout=self.timeout_s)
        except FutureTimeout:
            raise StoreUnavailable(what, self.timeout_s) from None
