"""Prepare once per sweep: before the trials fan out, tokenize each task and build each aligned
pretrained table once, into the cache every worker reads (`embinit.tasks.cache`, `embinit.init.cache`,
keyed by file content).

Without it, N trials starting together on a cold cache would each tokenize the same data (measured on
a GPU node: 12 trials, ~50 s each before the first step). The cache's per-entry lock alone would already
make them wait for one builder; preparing first also keeps the workers' GPUs from idling behind it.

Trials that differ only in what the caches do not hold (seed, learning rate, model sizes, ...) share
one preparation. A setting that fails here (a missing file, ...) is skipped: its trials report the
error themselves, as they would without this step.

Where the sweep starts its Ray here, for this machine alone, the workers read the files this process
reads: the warm-up then runs in a thread of this process while Ray starts (`prepare_here`), not as a
task once it has (`prepare_on_ray`, for a cluster or a Ray the caller owns). The thread is stopped with
the sweep (`Warmup.stop`). It imports torch into the driver and leaves its freed data there for the
sweep (docs/benchmarks.md, "The warm-up while Ray starts": a child process instead lost most of the
start-time win on 2 shared cores).
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
from concurrent.futures import Future
from typing import Any, Callable

from embinit.errors import EmbinitError

STOP_WAIT_S = 5.0   # how long a stopped warm-up is waited for

# TrialConfig fields that change neither the tokenized task nor the aligned pretrained rows
_IRRELEVANT = ("seed", "data_seed", "init_from", "lr", "epochs", "batch_size", "max_tokens", "layers",
               "emb_seed", "pe_positions", "ff_dim", "dropout", "attention_dropout", "activation_dropout",
               "pe_base", "pre_ln", "pos_encoding", "train_embeddings",
               "freeze_non_embeddings", "early_stopping_patience", "beam_size", "length_penalty", "precision",
               "threads", "device", "heads")


def data_key(cfg) -> str:
    """The part of a trial config its cache entries depend on (a coarse superset is harmless)."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in _IRRELEVANT}
    return repr(sorted(d.items()))


def distinct_configs(configs: list) -> list:
    """One config per data key, in first-seen order."""
    seen: dict[str, Any] = {}
    for cfg in configs:
        seen.setdefault(data_key(cfg), cfg)
    return list(seen.values())


def prepare_configs(configs: list, cache_dir=None, stop: threading.Event | None = None) -> dict[str, Any]:
    """Warm the caches for `configs` (TrialConfigs) on this machine; returns what was done. Once `stop`
    is set, no further setting is begun."""
    from embinit.train.prepare import load_inputs
    done, skipped = 0, []
    for cfg in distinct_configs(configs):
        if stop is not None and stop.is_set():
            break
        try:
            load_inputs(dataclasses.replace(cfg, device="cpu"), cache_dir)
            done += 1
        except EmbinitError as e:
            skipped.append(f"{cfg.task}/{cfg.init}: {e}")
    return {"prepared": done, "skipped": skipped}


def prepare_units(units: list, cache_dir=None, stop: threading.Event | None = None) -> dict[str, Any]:
    from embinit.config import TrialConfig
    return prepare_configs([TrialConfig.from_dict(t.config) for u in units for t in u.trials], cache_dir, stop)


# how long the preparation task may wait for a CPU of a cluster before the sweep says what it waits for
WAIT_NOTE_S = 10.0


def prepare_on_ray(units: list, cache_dir=None, say: Callable[[str], None] | None = None,
                   note_after_s: float = WAIT_NOTE_S) -> dict[str, Any]:
    """Run `prepare_units` as one Ray task (one CPU), so it reads the files where the workers do. On a
    cluster whose CPUs other jobs' trials hold, the task waits for one, and the sweep would print nothing
    meanwhile (it has not begun a trial): not done after `note_after_s`, `say` is told what it waits for."""
    import ray
    ref = ray.remote(num_cpus=1, num_gpus=0)(prepare_units).remote(units, cache_dir)
    ready, _ = ray.wait([ref], timeout=note_after_s)
    if not ready and say is not None:
        say(waiting_note(ray.available_resources().get("CPU", 0.0), ray.cluster_resources().get("CPU", 0.0)))
    return ray.get(ref)


def waiting_note(free: float, total: float) -> str:
    """What a sweep says while its preparation (one CPU) has not finished after `WAIT_NOTE_S`."""
    if free >= 1:   # it holds a CPU: the work itself is long (a large corpus, many pretrained tables)
        return "still preparing the data (tokenizing, aligning pretrained rows) before the first trial"
    return (f"preparing the data waits for a free CPU on the Ray cluster ({total:g} CPUs, "
            f"{max(free, 0):g} free: other jobs' trials hold them); the sweep's trials start after it")


class WarmupStopped(BaseException):
    """Raised in a warm-up's thread by `Warmup.stop`: it unwinds, so a cache entry being written is removed
    (`embinit.tasks.cache.save`) and the entry's lock released."""


class Warmup:
    """`prepare_units` running in a thread of this process: `result()` waits for it (raising its error),
    `stop()` ends it."""

    def __init__(self, units: list, cache_dir=None):
        self.stopping, self._future = threading.Event(), Future()
        self.thread = threading.Thread(target=self._run, args=(units, cache_dir), daemon=True,
                                       name="embinit-warmup")
        self.thread.start()

    def _run(self, units, cache_dir) -> None:
        try:
            try:
                self._future.set_result(prepare_units(units, cache_dir, self.stopping))
            except BaseException as e:   # handed to the caller, as a Ray task's error is
                self._future.set_exception(e)
        except WarmupStopped:   # stopped as it ended: nobody waits for it any more
            pass

    def result(self) -> dict[str, Any]:
        return self._future.result()

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """Stop it if it still runs: no further setting begins, and `WarmupStopped` is raised in the
        thread at its next Python step (a long call into C, a tokenizer's batch, finishes first); then
        wait up to `wait_s` for it to end."""
        if not self.thread.is_alive():
            return
        self.stopping.set()
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread.ident),
                                                   ctypes.py_object(WarmupStopped))
        self.thread.join(wait_s)


def prepare_here(units: list, cache_dir=None) -> Warmup:
    """`prepare_units` in a thread of this process, started before a Ray for this machine alone is (its
    workers read the files this process reads): the warm-up overlaps Ray's start. The caller takes its
    `result()` before the trials fan out (an error other than a skipped setting's is raised there, as
    `prepare_on_ray` raises it) and calls its `stop()` however it leaves (Ray failed to start, Ctrl-C)."""
    return Warmup(units, cache_dir)
