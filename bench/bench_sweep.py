"""Sweep benchmark: what embinit's Ray Tune + MLflow machinery costs, and how trials share cores.

1. Overhead: 16 trivially short trials (synthetic classification, 1 epoch, 64 examples) on a local Ray
   already running; sweep wall time against the sum of the trials' own `run_trial` time divided by the
   concurrency. Overhead per trial = (wall - sum(own) / concurrency) / trials. Goal: < 0.3 s.
   Split into the fixed start-up (sweep start -> the first trial's MLflow run: Tune starts the trial
   actors, which import torch + mlflow and open the MLflow store) and the steady state (first run start
   -> last run end, against own time). Measured with per-trial plots and checkpoint artifacts off and on.
2. Parallel efficiency on a small real grid (SST-2, GloVe-free: xavier/normal x 2 seeds, a training
   subset, 1 epoch): 2 one-thread trials at a time against one two-thread trial at a time; ratio of
   wall times (> 1: running trials side by side is the better use of 2 cores).

    python bench/bench_sweep.py --data-dir /path/with/sst2   # or EMBINIT_BENCH_DATA=...

Writes bench/results/bench_sweep.json. Ray start-up is measured separately and excluded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from embinit.tracking import mlflow_store, records
from embinit.spec import load_spec
from embinit.sweep import run_sweep
from machine import cpu_model  # bench/machine.py


def machine() -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "python": sys.version.split()[0],
            "load_avg_at_start": os.getloadavg()}


def child_runs(name: str, uri: str) -> list:
    exp = mlflow_store.experiment_id(name, uri)
    return [r for r in mlflow_store.search_runs(exp, uri) if records.KEY_TAG in r.data.tags]


def own_times(name: str, uri: str) -> list[float]:
    return [r.data.metrics["wall_time_s"] for r in child_runs(name, uri) if "wall_time_s" in r.data.metrics]


def sweep(spec_data: dict, tmp: Path, timeline: dict | None = None) -> tuple[float, list[float]]:
    uri = f"sqlite:///{tmp}/{spec_data['name']}.db"
    spec = load_spec({**spec_data, "mlflow": {**spec_data.get("mlflow", {}), "tracking_uri": uri}})
    mlflow_store.ensure_experiment(spec.name, uri)     # store creation is not per-trial overhead
    t0, epoch0 = time.perf_counter(), time.time()
    result = run_sweep(spec, progress=False, storage_path=str(tmp / "ray"))
    wall = time.perf_counter() - t0
    assert result.n_finished == len(spec.plan()), f"{result.n_failed} trials failed"
    if timeline is not None:  # MLflow run start/end times (ms) of the trials, against the sweep's
        runs = child_runs(spec.name, uri)
        timeline["first_trial_start_s"] = min(r.info.start_time for r in runs) / 1000 - epoch0
        timeline["last_trial_end_s"] = max(r.info.end_time for r in runs) / 1000 - epoch0
    return wall, own_times(spec.name, uri)


def overhead(tmp: Path, artifacts: bool) -> dict:
    n, conc = 16, 2
    data = {"name": f"overhead-{'art' if artifacts else 'plain'}", "seeds": n // 2,
            "tasks": [{"task": "synthetic_classification", "epochs": 1, "max_train_examples": 64,
                       "d_model": 16, "ff_dim": 32, "heads": 2}],
            "inits": ["xavier", "normal"], "resources": {"cpus": 1}, "max_concurrent": conc,
            "mlflow": {"log_plots": artifacts, "log_checkpoint": artifacts}}
    tl: dict = {}
    wall, own = sweep(data, tmp, tl)
    steady = tl["last_trial_end_s"] - tl["first_trial_start_s"]
    return {"trials": n, "concurrency": conc, "artifacts": artifacts, "wall_s": wall,
            "sum_own_s": sum(own), "mean_own_s": sum(own) / len(own),
            "overhead_per_trial_s": (wall - sum(own) / conc) / n,
            "startup_s": tl["first_trial_start_s"], "tail_s": wall - tl["last_trial_end_s"],
            "steady_state_overhead_per_trial_s": (steady - sum(own) / conc) / n}


def efficiency(tmp: Path, data_dir: str) -> dict:
    grid = {"tasks": [{"task": "sst2", "epochs": 1, "max_train_examples": 4000, "d_model": 64,
                       "ff_dim": 256, "heads": 4, "batch_size": 64}],
            "inits": ["xavier", "normal"], "seeds": 2, "data_dir": data_dir}
    side = {**grid, "name": "eff-2x1", "resources": {"cpus": 1}, "max_concurrent": 2}
    wide = {**grid, "name": "eff-1x2", "resources": {"cpus": 2}, "max_concurrent": 1}
    wall_side, own_side = sweep(side, tmp)
    wall_wide, own_wide = sweep(wide, tmp)
    return {"grid": "sst2 (4000 train examples, 1 epoch, D=64) x {xavier, normal} x 2 seeds",
            "two_one_thread_wall_s": wall_side, "one_two_thread_wall_s": wall_wide,
            "mean_trial_s_one_thread": sum(own_side) / len(own_side),
            "mean_trial_s_two_threads": sum(own_wide) / len(own_wide),
            "speedup_side_by_side": wall_wide / wall_side}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("EMBINIT_BENCH_DATA"),
                    help="root with sst2/ (GLUE TSVs) for the efficiency part; omitted: skip that part")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_sweep.json"))
    args = ap.parse_args()
    from embinit.sweep.ray_runtime import default_env
    default_env()
    import ray
    out = {"machine": machine()}
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    out["ray_start_s"] = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        for artifacts in (False, True):
            res = overhead(Path(tmp), artifacts)
            print(json.dumps(res), flush=True)
            out[f"overhead_{'artifacts' if artifacts else 'plain'}"] = res
        if args.data_dir:
            out["efficiency"] = efficiency(Path(tmp), args.data_dir)
            print(json.dumps(out["efficiency"]), flush=True)
        else:
            print("no --data-dir / EMBINIT_BENCH_DATA: parallel-efficiency part skipped", file=sys.stderr)
    ray.shutdown()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
