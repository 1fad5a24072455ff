"""Run every benchmark in bench/ one after another (`make bench`), each in its own process.

    python bench/run_all.py [--only NAME ...] [--dry-run]

Each script writes its own JSON under bench/results/ and reads its inputs from its usual environment
variables (see its docstring). A script whose required input files are not there is skipped with the
variable to set, so a machine without GloVe or the questions file still runs the rest. Exits non-zero
if any script that ran failed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _files(*pairs: tuple[str, str | None]) -> str | None:
    """None when every (variable, default path) names an existing file, else what to set."""
    missing = [var for var, default in pairs if not Path(os.environ.get(var) or default or "").is_file()]
    return f"set {', '.join('$' + v for v in missing)}" if missing else None


def _multi30k() -> str | None:
    folder = os.environ.get("EMBINIT_BENCH_MULTI30K")
    return None if folder and Path(folder, "train.de").is_file() else "set $EMBINIT_BENCH_MULTI30K (a Multi30k folder)"


def _cuda() -> str | None:
    import shutil
    return None if shutil.which("nvidia-smi") else "needs a CUDA GPU (see docs/benchmarks.md)"


# name -> what must exist before it can run (None: it needs nothing, or falls back on synthetic data)
BENCHES = {
    "bench_api": lambda: None,
    "bench_trainer": lambda: None,
    "bench_similarity": lambda: None,
    "bench_knn_exact": lambda: None,
    "bench_beam_search": lambda: None,     # vectorised vs row-by-row beam search, 64 sentences, beams 4, 5 (CPU)
    "bench_sweep": lambda: None,
    "bench_fused": lambda: None,
    "bench_fused_ops": lambda: None,       # kernels per fused step as G grows (deterministic, seconds)
    "bench_control_plane": lambda: None,   # 1,000 noop trials through the service on SQLite (minutes)
    "bench_trial_writes": lambda: None,    # one trial's MLflow path alone, and reading every run both ways
    "bench_store_scale": lambda: None,     # dry run, dedup, report, service reads at 50 / 200 / 800 trials (minutes)
    "bench_unit_fetch": lambda: None,      # a Tune trial finding its unit: the whole list per trial vs once
    "bench_leaks": lambda: None,           # a reused worker over N trials, a sweep's leftovers, the API (minutes)
    "bench_sweep_start": lambda: None,     # a local sweep before its trials fan out: store, Ray start, warm-up
    "bench_vector_check": lambda: None,    # the spec check's peak memory on a 500k-word vector file, before / after
    "bench_spec_recheck": lambda: None,    # the spec check of a vector file in a later process: read again vs marked
    "bench_tune_checkpoint": lambda: None,  # an epoch's tune.report with the trial folder as checkpoint vs without
    "bench_trainer_ab": _multi30k,
    "bench_gpu": lambda: _cuda() or _multi30k(),
    "bench_glove_load": lambda: _files(("EMBINIT_BENCH_GLOVE", "/work/assets/glove.6B.50d.txt")),
    "bench_trial_keys": lambda: _files(("EMBINIT_BENCH_GLOVE", "/work/assets/glove.6B.50d.txt")),
    "bench_analogy": lambda: _files(("EMBINIT_GLOVE", None), ("EMBINIT_ANALOGY_QUESTIONS", None)),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=sorted(BENCHES), help="run these benchmarks only")
    ap.add_argument("--dry-run", action="store_true", help="say what would run or be skipped, run nothing")
    args = ap.parse_args(argv)
    failed = []
    for name in args.only or BENCHES:
        why_not = BENCHES[name]()
        if why_not:
            print(f"[skip] {name}: {why_not}", flush=True)
            continue
        cmd = [sys.executable, str(HERE / f"{name}.py")]
        print(f"[run]  {' '.join(cmd)}", flush=True)
        if args.dry_run:
            continue
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=HERE.parent)
        print(f"[{'ok' if rc == 0 else 'FAIL'}]   {name} ({time.perf_counter() - t0:.0f} s, exit {rc})", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
