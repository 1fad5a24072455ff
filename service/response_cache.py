"""Rendered responses of finished experiments, kept in memory.

A finished experiment (succeeded, failed, cancelled) never changes: a re-run is a new experiment, and a
cancel of a finished one is refused. So its status, trials and results can be served from memory without
touching the database or MLflow, in any number of API processes, with no invalidation.

The cache is bounded in bytes as well as in entries, the least recently used going first: `/trials` pages
are keyed by `limit` and `offset`, and a client walking the offsets of a 10,000-trial experiment one by one
(pages of megabytes) filled 2,048 entries with gigabytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

MAX_BYTES = 256 * 2 ** 20   # enough for hundreds of full trial tables; a fraction of the API's memory


class ResponseCache:
    def __init__(self, max_entries: int = 2048, max_bytes: int = MAX_BYTES):
        self._data: OrderedDict[tuple, tuple[bytes, str]] = OrderedDict()
        self._max, self._max_bytes = max_entries, max_bytes
        self.size_bytes = 0   # the bodies held
        self._lock = threading.Lock()

    def get(self, key: tuple) -> tuple[bytes, str] | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
            return hit

    def put(self, key: tuple, value: tuple[bytes, str]) -> None:
        if len(value[0]) > self._max_bytes:   # larger than the whole budget: served, not kept
            return
        with self._lock:
            old = self._data.pop(key, None)
            self.size_bytes -= len(old[0]) if old is not None else 0
            self._data[key] = value
            self.size_bytes += len(value[0])
            while len(self._data) > self._max or self.size_bytes > self._max_bytes:
                _, (body, _media) = self._data.popitem(last=False)
                self.size_bytes -= len(body)
