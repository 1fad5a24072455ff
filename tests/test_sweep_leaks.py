"""What a sweep leaves behind and what a reused trial worker accumulates (bench/bench_leaks.py measures
both): Tune's per-sweep state and its registered trainable are removed once its run is over
(embinit.sweep.tune_state); N trials run
one after another in one worker process, as a reused Tune actor runs them, hold no more file
descriptors, threads, temporary folders or checkpoint files than one did."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from embinit.spec import load_spec
from embinit.sweep import tune_state
from helpers.sweep import sweep_spec_data


def _grid(tmp_path, errors: int = 0):
    """A finished Tune run's ResultGrid as `tune_state.discard` reads it, with its folder on local disk."""
    from pyarrow.fs import LocalFileSystem
    folder = tmp_path / "ray_results" / "embinit_x_0123456789ab"
    (folder / "Xavier-s0-00000000").mkdir(parents=True)
    (folder / "experiment_state-2026.json").write_text("{}")
    return SimpleNamespace(experiment_path=str(folder), filesystem=LocalFileSystem(), num_errors=errors), folder


def _session(tmp_path, monkeypatch, name: str) -> Path:
    """A Ray session's artifacts folder holding the staging copy of Tune run `name`."""
    import ray.train.constants
    root = tmp_path / "session" / "artifacts"
    (root / "2026-11-27_16-37-43" / name / "working_dirs" / "Xavier-s0-00000000").mkdir(parents=True)
    (root / "2026-11-27_16-37-43" / "another_sweep").mkdir()
    monkeypatch.setattr(ray.train.constants, "_get_ray_train_session_dir", lambda: str(root))
    return root


def test_a_finished_tune_run_leaves_neither_its_folder_nor_its_session_copy(tmp_path, monkeypatch):
    results, folder = _grid(tmp_path)
    root = _session(tmp_path, monkeypatch, folder.name)
    removed = tune_state.discard(results)
    assert not folder.exists() and (tmp_path / "ray_results").is_dir()   # the storage root stays
    assert [p.name for p in root.glob("*/*")] == ["another_sweep"]          # another sweep's copy stays
    assert len(removed) == 2


def test_a_tune_run_with_an_errored_trial_keeps_its_state(tmp_path, monkeypatch):
    results, folder = _grid(tmp_path, errors=1)
    root = _session(tmp_path, monkeypatch, folder.name)
    assert tune_state.discard(results) == []
    assert folder.is_dir() and (root / "2026-11-27_16-37-43" / folder.name).is_dir()


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    """This process's temporary folder, of its own: the machine's /tmp gains and loses entries of other
    processes (other tests, the CI's other pytest workers) meanwhile."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.fixture
def own_threads(monkeypatch) -> list[threading.Thread]:
    """The threads this test's own thread starts (the trials', and what they leave running), not those
    other tests left in this pytest worker: in CI (2026-11-28) `threading.active_count()` was once one
    higher after the trials than after the first, 13 against 12, in a worker whose earlier tests had
    left 11 threads; run alone, the trials start none that outlive them."""
    me, started, real = threading.current_thread(), [], threading.Thread.start

    def start(self, *args, **kwargs):
        if threading.current_thread() is me:
            started.append(self)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(threading.Thread, "start", start)
    return started


def _open_state(threads: list[threading.Thread]) -> dict:
    tmp = Path(tempfile.gettempdir())
    return {"fds": sorted(os.listdir("/proc/self/fd")), "threads": sorted(t.name for t in threads if t.is_alive()),
            "tmp": sorted(p.name for p in tmp.iterdir() if p.name.startswith(("tmp", "embinit")))}


def _worker(name: str, seeds: int, tmp_path, monkeypatch):
    """A sweep's trials as a reused worker gets them, without Ray: (the spec, the store's URI, the MLflow
    experiment, the sweep's run, the context and the units `train_unit` runs, one trial each)."""
    from embinit.tracking import mlflow_store, run_writers
    from embinit.sweep.work import SweepContext, Unit, work_item
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "home"))
    spec = load_spec(sweep_spec_data(name, tmp_path, {"task": "synthetic_classification", "epochs": 2,
                                                      "max_train_examples": 64, "d_model": 16, "ff_dim": 32,
                                                      "heads": 2}, seeds=seeds))
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    exp = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials())
    ctx = SweepContext(uri, exp, parent, log_plots=False, cache_dir=spec.cache_dir, one_machine=True)
    return spec, uri, exp, parent, ctx, [Unit((work_item(spec, p),)) for p in spec.plan()]


@pytest.mark.slow
def test_a_reused_worker_holds_no_more_after_many_trials_than_after_one(tmp_path, monkeypatch, own_tmp,
                                                                         own_threads):
    """The worker's side of 8 trials in one process (what a reused Tune actor runs): the fds, threads and
    temporary files after the last equal those after the first; each trial's checkpoint folder is gone
    once its run is recorded, and every run is closed."""
    from embinit.tracking import mlflow_store
    from embinit.sweep.trainable import train_unit
    spec, uri, exp, parent, ctx, units = _worker("worker", 8, tmp_path, monkeypatch)
    train_unit({"unit": 0}, ctx, units)
    after_one = _open_state(own_threads)
    for i in range(1, len(units)):
        train_unit({"unit": i}, ctx, units)
    assert _open_state(own_threads) == after_one
    left = [p for p in (Path(spec.cache_dir) / "checkpoints").rglob("*") if p.is_file()]
    assert left == []
    runs = mlflow_store.search_runs(exp, uri, f"tags.`embinit.sweep_run` = '{parent}'")
    assert len(runs) == 8 and {r.info.status for r in runs} == {"FINISHED"}


class _Boom:
    """Trainer callback: the trial's worker fails at the end of its first epoch (a bug, not a user error)."""

    def on_epoch_end(self, ctx, epoch, metrics):
        raise RuntimeError("boom")


@pytest.mark.slow
def test_failing_trials_leave_no_running_run_and_no_open_lock(tmp_path, monkeypatch, own_tmp, own_threads):
    """A trial whose worker raises closes its run FAILED and releases its claim's lock (the fd; the lock
    file stays beside the kept folder), keeping its checkpoint folder for the retry; three such trials in
    one process hold what one did."""
    from embinit.tracking import mlflow_store
    from embinit.sweep.trainable import train_unit
    spec, uri, exp, parent, ctx, units = _worker("failing", 3, tmp_path, monkeypatch)
    states = []
    for i in range(len(units)):
        with pytest.raises(RuntimeError, match="boom"):
            train_unit({"unit": i}, ctx, units, extra_callbacks=lambda cfg: [_Boom()])
        states.append(_open_state(own_threads))
    assert states[-1] == states[0]
    runs = mlflow_store.search_runs(exp, uri, f"tags.`embinit.sweep_run` = '{parent}'")
    assert len(runs) == 3 and {r.info.status for r in runs} == {"FAILED"}
    kept = sorted(p.name for p in (Path(spec.cache_dir) / "checkpoints").glob("*/*") if p.is_dir())
    assert kept == sorted(u.trials[0].key for u in units)   # the folders a retry resumes from


@pytest.mark.slow
def test_a_sweep_leaves_no_tune_state_behind(ray_local, tmp_path):
    from ray.train.constants import _get_ray_train_session_dir

    from embinit.sweep import run_sweep
    spec = load_spec(sweep_spec_data("tidy", tmp_path, "synthetic_lm", inits=["xavier", "normal"], seeds=3,
                                     execution={"trainer": "noop"}))
    result = run_sweep(spec, progress=False)
    assert (result.n_finished, result.n_failed) == (6, 0)
    assert list((tmp_path / "cache" / "ray_results").iterdir()) == []
    assert not list(Path(_get_ray_train_session_dir()).glob("*/embinit_tidy_*"))
    # nor its trainable in the cluster's key-value store (a service's drivers never exit as scripts)
    from ray.experimental.internal_kv import _internal_kv_list
    assert not [k for k in _internal_kv_list(b"TuneRegistry") if b"/embinit_tidy_" in k]
