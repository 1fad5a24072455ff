"""Rendered responses of finished experiments, kept in memory.

A finished experiment (succeeded, failed, cancelled) never changes: a re-run is a new experiment, and a
cancel of a finished one is refused. So its status, trials and results can be served from memory without
touching the database or MLflow, in any number of API processes, with no invalidation.
"""

from __future__ import annotations

import threading
from collections import OrderedDict


class ResponseCache:
    def __init__(self, max_entries: int = 2048):
        self._data: OrderedDict[tuple, tuple[bytes, str]] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def get(self, key: tuple) -> tuple[bytes, str] | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
            return hit

    def put(self, key: tuple, value: tuple[bytes, str]) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)
