"""What grows per trial or per experiment and is never released: a reused trial worker, a sweep's leftovers
on disk, the API process over many experiments.

    python bench/bench_leaks.py [--trials 30] [--sweep-trials 30] [--experiments 200] [--only worker sweep api]

1. worker: the worker side of N small real trials (synthetic classification, 2 epochs, 64 examples,
   D=16) run one after another in this process, as a reused Tune actor runs them (`train_unit` with Tune's
   report and checkpoint as no-ops outside a Tune session): RSS, open fds, threads, child processes,
   entries in the temp folder, gc objects, and the files left in the sweep's checkpoint folders, after the
   first trial and after the last; growth ratios last / first and last / middle (1.0: nothing grows). Every run must be
   FINISHED, every trial folder gone.
2. sweep: N no-work trials (`execution.trainer: noop`) through a real sweep on a local Ray: what the sweep
   leaves on disk once it returns: Tune's storage (`<cache_dir>/ray_results`) and the staging copy in the
   Ray session (`/tmp/ray/session_*/artifacts/*/<the sweep's Tune run>`), in files and bytes, and the
   trainable Tune registered in the cluster's key-value store.
3. api: M experiments through the real app and result store (the drivers: service.fakes' in-process
   runner, which trains nothing), each submitted, read while running (status, trials, results), finished
   and read again: RSS and the per-experiment entries the reconciler, the result
   store and the runner keep, after M/4 and after M experiments.

Results are appended to bench/results/leaks.json with the machine and its load.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import append_result, cpu_model  # noqa: E402

TINY = {"task": "synthetic_classification", "epochs": 2, "max_train_examples": 64, "d_model": 16, "ff_dim": 32,
        "heads": 2}


def _spec_data(name: str, tmp: Path, seeds: int, **over) -> dict:
    return {"name": name, "tasks": [TINY], "inits": ["xavier"], "seeds": seeds, "resources": {"cpus": 1},
            "retries": 0, "cache_dir": str(tmp / "cache"),
            "mlflow": {"tracking_uri": f"sqlite:///{tmp}/m.db", "log_plots": False}, **over}


def _process() -> dict:
    import psutil
    gc.collect()
    p = psutil.Process()
    tmp = Path(tempfile.gettempdir())
    return {"rss_mb": round(p.memory_info().rss / 2 ** 20, 1), "fds": p.num_fds(), "threads": threading.active_count(),
            "children": len(p.children(recursive=True)), "gc_objects": len(gc.get_objects()),
            "temp_entries": sum(1 for e in tmp.iterdir() if e.name.startswith(("tmp", "embinit")))}


def _files(folder: Path) -> dict:
    files = [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []
    return {"files": len(files), "dirs": sum(1 for p in folder.rglob("*") if p.is_dir()) if folder.exists() else 0,
            "bytes": sum(p.stat().st_size for p in files)}


def worker(n: int, tmp: Path) -> dict:
    from embinit.tracking import mlflow_store, run_writers
    from embinit.spec import load_spec
    from embinit.sweep.trainable import train_unit
    from embinit.sweep.work import SweepContext, Unit, work_item
    os.environ["EMBINIT_CACHE_DIR"] = str(tmp / "home")
    spec = load_spec(_spec_data("leaks-worker", tmp, n))
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    exp = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials())
    ctx = SweepContext(uri, exp, parent, log_plots=False, cache_dir=spec.cache_dir, one_machine=True)
    units = [Unit((work_item(spec, p),)) for p in spec.plan()]
    rows, t0 = [], time.perf_counter()
    for i in range(n):
        train_unit({"unit": i}, ctx, units)
        rows.append(_process())
    runs = mlflow_store.search_runs(exp, uri, f"tags.`embinit.sweep_run` = '{parent}'")
    first, last = rows[0], rows[-1]
    return {"trials": n, "seconds": round(time.perf_counter() - t0, 1), "after_first": first, "after_last": last,
            "rss_growth_ratio": round(last["rss_mb"] / first["rss_mb"], 3),
            # the allocator settles over the first trials: the second half is where a per-trial leak shows
            "rss_growth_ratio_second_half": round(last["rss_mb"] / rows[n // 2]["rss_mb"], 3),
            "rss_per_trial_mb_after_first": round((last["rss_mb"] - first["rss_mb"]) / max(1, n - 1), 3),
            "checkpoint_folders_left": _files(Path(spec.cache_dir) / "checkpoints"),
            "runs_by_status": {s: sum(r.info.status == s for r in runs) for s in {r.info.status for r in runs}}}


def sweep(n: int, tmp: Path) -> dict:
    from ray.train.constants import _get_ray_train_session_dir

    from embinit.spec import load_spec
    from embinit.sweep import run_sweep
    from embinit.sweep.ray_runtime import RayRuntime
    spec = load_spec(_spec_data("leaks-sweep", tmp, n, execution={"trainer": "noop"}))
    with RayRuntime(None, spec.resources):   # the sweep joins it; the session is read before it stops
        t0 = time.perf_counter()
        result = run_sweep(spec, progress=False)
        wall = time.perf_counter() - t0
        staged = [p for p in Path(_get_ray_train_session_dir()).glob("*/embinit_leaks-sweep_*")]
        session = {"folders": len(staged), **{k: sum(_files(p)[k] for p in staged) for k in ("files", "dirs", "bytes")}}
        from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list
        entries = [k for k in _internal_kv_list(b"TuneRegistry") if b"/embinit_leaks-sweep_" in k]
        registry = {"entries": len(entries), "bytes": sum(len(_internal_kv_get(k) or b"") for k in entries)}
    return {"trials": n, "finished": result.n_finished, "wall_s": round(wall, 1),
            "tune_storage_left": _files(Path(spec.cache_dir) / "ray_results"), "ray_session_copy_left": session,
            "tune_registry_left": registry}


def api(m: int, tmp: Path) -> dict:
    from fastapi.testclient import TestClient

    from service.fakes import FakeCluster, FakeRunner
    from service.main import create_app
    from service.settings import Settings
    cluster = FakeCluster()
    settings = Settings(database_url=f"sqlite:///{tmp}/state.db", tracking_uri=f"sqlite:///{tmp}/m.db",
                        refresh_interval_s=0.0, _env_file=None)
    marks = {}
    # the real app and result store (MLflow in SQLite, no runs: the drivers are fakes that train nothing)
    with TestClient(create_app(settings, runner=FakeRunner(cluster))) as client:
        app = client.app
        for i in range(m):
            exp_id = client.post("/experiments", json={"name": f"leaks-{i}", "tasks": ["synthetic_translation"],
                                                       "inits": ["xavier"], "seeds": 1}).json()["id"]
            FakeRunner(cluster).advance(f"embinit-exp-{exp_id}", "running", running=1)
            for path in ("", "/trials", "/results"):   # read while it runs
                client.get(f"/experiments/{exp_id}{path}")
            FakeRunner(cluster).advance(f"embinit-exp-{exp_id}", "succeeded", finished=1)
            client.get(f"/experiments/{exp_id}")
            if i + 1 in (m // 4, m):
                rec, inner = app.state.reconciler, app.state.store.inner
                marks[i + 1] = {**_process(), "reconciler_entries": len(rec._checked) + len(rec._locks),
                                "live_builds": len(inner._live)}
    first, last = marks[m // 4], marks[m]
    return {"experiments": m, "after_quarter": first, "after_all": last,
            "rss_growth_ratio": round(last["rss_mb"] / first["rss_mb"], 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--sweep-trials", type=int, default=30)
    ap.add_argument("--experiments", type=int, default=200)
    ap.add_argument("--only", nargs="+", choices=("worker", "sweep", "api"), default=("worker", "sweep", "api"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "leaks.json")
    args = ap.parse_args(argv)
    from embinit.sweep.ray_runtime import default_env
    default_env()
    result: dict = {"bench": "leaks", "cpu": cpu_model(), "cores": os.cpu_count(), "load_avg_at_start": os.getloadavg(),
                    "commit": os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip()}
    for part in args.only:
        with tempfile.TemporaryDirectory(prefix=f"bench-leaks-{part}-") as tmp:
            n = {"worker": args.trials, "sweep": args.sweep_trials, "api": args.experiments}[part]
            result[part] = {"worker": worker, "sweep": sweep, "api": api}[part](n, Path(tmp))
            print(part, result[part], flush=True)
    result["load_avg_at_end"] = os.getloadavg()
    append_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
