"""What a finished Ray Tune run leaves behind, removed: embinit never restores a Tune run (a rerun of the
spec resumes from the trial folders and MLflow, embinit.sweep.resume), so once `tuner.fit()` has returned
nothing reads Tune's state again.

A Tune run writes, per sweep, an experiment folder in its storage (`<cache_dir>/ray_results/<name>/` or
the object store's `ray_results/<name>/`: `experiment_state-*.json`, ~12 KB per trial, a folder per
trial, `tuner.pkl`, and a trial's last checkpoint where Tune keeps a copy) and a staging copy of the
same state in the Ray session on the driver's node (`/tmp/ray/session_*/artifacts/<time>/<name>/`, with
an empty working folder per trial). Kept, a CLI sweep left both behind for good, and the service, whose
Ray session lives for days, gained both with every experiment (bench/bench_leaks.py).

A run in which a Tune trial errored keeps them: its trial folders hold Tune's `error.txt` (why a worker
died, where MLflow may have no traceback).

Tune also registers the sweep's trainable (pickled, ~5 KB) in the Ray cluster's key-value store, under the
Ray job and the sweep's unique name, and removes it only when a script-mode driver exits: the service's
experiment drivers are actors in the API's job, so every experiment left its entry in the GCS for the
life of the cluster. `unregister` removes it once the Tune run is over.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

log = logging.getLogger("embinit.sweep")


def discard(results: Any) -> list[str]:
    """Remove the Tune run's experiment folder (in its storage: local or the object store) and its
    staging copy in the driver node's Ray session, given `tuner.fit()`'s ResultGrid; returns what was
    removed. Nothing is removed when a trial errored; a removal that fails is logged, never raised (the
    sweep's results are in MLflow already)."""
    path = results.experiment_path
    if results.num_errors:
        log.info("Tune's state of this sweep is kept at %s: %d of its trials errored (error.txt in their "
                 "folders)", path, results.num_errors)
        return []
    removed = []
    try:
        results.filesystem.delete_dir(path)
        removed.append(path)
    except Exception as e:  # already gone, or the store refuses: leave it, say so
        log.warning("could not remove Tune's state %s: %s", path, e)
    for staged in _session_copies(Path(path).name):
        shutil.rmtree(staged, ignore_errors=True)
        removed.append(str(staged))
    return removed


def _session_copies(name: str) -> list[Path]:
    """The staging folders of Tune run `name` in this node's Ray session (one per Tune start time)."""
    try:
        from ray.train.constants import _get_ray_train_session_dir
        root = Path(_get_ray_train_session_dir())
    except Exception:  # no Ray session here (Ray Client), or Ray moved it: nothing of ours to find
        return []
    return [p for p in root.glob(f"*/{name}") if p.is_dir()] if name else []


def unregister(name: str) -> None:
    """Remove Tune run `name`'s trainable from the cluster's key-value store (and this process's list of
    what it registered); a failure is logged, never raised."""
    try:
        from ray.tune.registry import TRAINABLE_CLASS, _global_registry
        _global_registry.unregister(TRAINABLE_CLASS, name)
        _global_registry._registered.discard((TRAINABLE_CLASS, name))
    except Exception as e:  # a Ray without this registry, or the cluster gone: nothing of ours is left to remove
        log.warning("could not unregister Tune's trainable %s: %s", name, e)


def fit(tuner, name: str):
    """`tuner.fit()` for Tune run `name`, then what it leaves removed (`discard`, `unregister`); its results,
    or None when Tune ran every trial but could not read its own state back (`_read_back_failed`)."""
    try:
        try:
            results = tuner.fit()
        except Exception as e:
            if not _read_back_failed(tuner):
                raise
            log.warning("Tune ran the sweep's trials but could not read its own state back (%s: %s); the "
                        "trials' outcomes are in MLflow; Tune's state is kept", type(e).__name__, e)
            return None
        discard(results)
        return results
    finally:
        unregister(name)


def _read_back_failed(tuner) -> bool:
    """Whether `tuner.fit()` raised after its trials had all ended, while building its ResultGrid from
    Tune's files: an errored trial's `error.pkl` that a full disk left empty is `EOFError: Ran out of
    input` there. That failed the whole sweep with that message, its never-started trials' runs too, and
    hid each trial's own error, which MLflow holds (embinit never reads Tune's results)."""
    return getattr(getattr(tuner, "_local_tuner", None), "_experiment_analysis", None) is not None
