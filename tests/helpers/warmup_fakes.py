"""Stand-ins for the data warm-up's work (`embinit.sweep.warmup.prepare_configs`)."""

import threading
import time
from pathlib import Path

from embinit.errors import EmbinitError

RELEASE = threading.Event()   # ends a slow write the warm-up's stop did not end
TMP_GLOB = ".*.tmp"


class _Slow:
    """Pickles for up to a minute: a cache entry being written all that while (its `.tmp` on disk)."""

    def __reduce__(self):
        end = time.monotonic() + 60
        while not RELEASE.is_set() and time.monotonic() < end:   # Python steps: a stop can land between
            time.sleep(0.05)
        raise RuntimeError("released")


def slow_write(configs, cache_dir=None, stop=None):
    from embinit.tasks import cache
    cache.save(cache.entry_path(cache.cache_root(cache_dir), "slow", "0" * 24), {"slow": _Slow()})
    return {"prepared": 1, "skipped": []}


def embinit_error(configs, cache_dir=None, stop=None):
    raise EmbinitError("the warm-up found a problem: fix the data folder")


def runtime_error(configs, cache_dir=None, stop=None):
    raise RuntimeError("the warm-up broke")


FAKES = {"slow_write": slow_write, "embinit_error": embinit_error, "runtime_error": runtime_error}


def tmp_files(cache_dir) -> list[Path]:
    return list((Path(cache_dir) / "tasks").glob(TMP_GLOB))
