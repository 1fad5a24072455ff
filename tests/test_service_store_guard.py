"""service.store_guard: identical MLflow reads share one call (single flight), also after a caller gave
up on it; different reads and writes do not."""

from __future__ import annotations

import threading
import time

import pytest

from service.store_guard import GuardedStore, StoreUnavailable


class SlowStore:
    """A store whose reads block until `release` is set, counting the calls that reached it."""

    def __init__(self):
        self.release = threading.Event()
        self.calls: list[tuple] = []
        self.lock = threading.Lock()

    def trials(self, exp_id: str) -> list[dict]:
        with self.lock:
            self.calls.append(("trials", exp_id))
        self.release.wait(10)
        return [{"key": f"{exp_id}-k"}]

    def close_orphans(self, exp_id: str) -> int:
        with self.lock:
            self.calls.append(("close_orphans", exp_id))
        self.release.wait(10)
        return 0


def _many(fn, n: int) -> list:
    out, threads = [None] * n, []
    for i in range(n):
        def run(i=i):
            try:
                out[i] = fn()
            except StoreUnavailable as e:
                out[i] = e
        threads.append(threading.Thread(target=run))
    for t in threads:
        t.start()
    return out, threads


def test_concurrent_identical_reads_make_one_call_and_each_gets_its_own_answer():
    inner = SlowStore()
    guarded = GuardedStore(inner, timeout_s=5, max_concurrency=8)
    out, threads = _many(lambda: guarded.trials("e1"), 12)
    time.sleep(0.3)
    inner.release.set()
    for t in threads:
        t.join()
    assert inner.calls == [("trials", "e1")]
    assert all(o == [{"key": "e1-k"}] for o in out)
    assert len({id(o) for o in out}) == 12                 # no caller can change another's answer


def test_a_read_given_up_is_joined_not_started_again():
    inner = SlowStore()
    guarded = GuardedStore(inner, timeout_s=0.3, max_concurrency=8)
    for _ in range(3):                                      # pollers past the time limit
        with pytest.raises(StoreUnavailable):
            guarded.trials("big")
    assert inner.calls == [("trials", "big")]               # one read in flight, not three
    inner.release.set()
    time.sleep(0.2)
    assert guarded.trials("big") == [{"key": "big-k"}]      # done: the next poll reads afresh
    assert inner.calls == [("trials", "big")] * 2


def test_different_reads_and_writes_are_not_shared():
    inner = SlowStore()
    guarded = GuardedStore(inner, timeout_s=5, max_concurrency=8)
    out, threads = _many(lambda: guarded.trials("e1"), 2)
    out2, threads2 = _many(lambda: guarded.trials("e2"), 1)
    out3, threads3 = _many(lambda: guarded.close_orphans("e1"), 2)
    time.sleep(0.3)
    inner.release.set()
    for t in threads + threads2 + threads3:
        t.join()
    assert sorted(inner.calls) == [("close_orphans", "e1"), ("close_orphans", "e1"), ("trials", "e1"),
                                   ("trials", "e2")]
