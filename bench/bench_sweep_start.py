"""Benchmark: what a local sweep costs before its trials fan out: `embinit run tune_configs/quickstart.yaml
epochs=2 seeds=1` in a fresh folder (a new SQLite store, a new data cache), run in-process and stopped
(as by Ctrl-C) where Tune would start the trials. Measured: the new store's creation (`prepare_store`),
Ray's start with the data warm-up (from `_execute`'s entry to `run_tune`), the whole time to the fan-out,
and the driver's RSS there.

`--trees` compares checkouts (e.g. one exported with `git archive` before a change, and this one), each
in a fresh process, alternating, `--rounds` times; with the machine's load, since only a ratio within one
run means anything on a shared machine.

Usage: python bench/bench_sweep_start.py [--trees OLD_TREE .] [--rounds 2]
Writes bench/results/sweep_start.json (with lscpu's model) and prints a row per run and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {"HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
       "TOKENIZERS_PARALLELISM": "false"}


def _one(tree: str) -> dict:
    """In this (fresh) process, on `tree`'s code: the quickstart's start, stopped at the fan-out."""
    import atexit
    import shutil

    import psutil
    sys.path[:0] = [tree]
    tmp = tempfile.mkdtemp(prefix="bench-sweep-start-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)   # its store and cache, once Ray has stopped
    os.environ.update({**ENV, "EMBINIT_CACHE_DIR": f"{tmp}/cache"})
    os.chdir(tmp)
    t0 = time.time()
    import embinit.sweep.run as run
    import embinit.sweep.tune_run as tune_run
    assert run.__file__.startswith(tree), run.__file__
    marks: dict = {}
    execute, prepare_store = run._execute, run.prepare_store

    def timed_execute(job, units):
        marks["execute"] = time.time()
        return execute(job, units)

    def timed_store(uri):
        start = time.time()
        try:
            return prepare_store(uri)
        finally:
            marks["store_s"] = time.time() - start

    def fan_out(job, units):   # where Tune would start the trials: stop as Ctrl-C does
        marks["tune"], marks["rss_mb"] = time.time(), psutil.Process().memory_info().rss / 2**20
        raise KeyboardInterrupt
    run._execute, run.prepare_store, tune_run.run_tune = timed_execute, timed_store, fan_out
    from embinit.cli import main
    main(["run", f"{tree}/tune_configs/quickstart.yaml", "epochs=2", "seeds=1", "--quiet"])
    return {"store_s": marks["store_s"], "ray_and_warmup_s": marks["tune"] - marks["execute"],
            "to_fan_out_s": marks["tune"] - t0, "driver_rss_mb": marks["rss_mb"], "load1": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", nargs="+", default=[str(ROOT)])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:   # embinit imported from that tree alone
        print(json.dumps(_one(args.one)))
        return
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    from machine import append_result, cpu_model  # bench/machine.py
    trees = [str(Path(t).resolve()) for t in args.trees]
    runs: dict[str, list[dict]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            proc = subprocess.run([sys.executable, __file__, "--one", tree], capture_output=True, text=True,
                                  check=True, env={**os.environ, **ENV, "PYTHONPATH": tree})
            runs[tree].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(tree, {k: round(v, 2) for k, v in runs[tree][-1].items()}, flush=True)
    medians = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for t, rs in runs.items()}
    append_result(ROOT / "bench" / "results" / "sweep_start.json",
                  {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model(),
                   "runs": runs, "medians": medians})
    print(f"\nmedians ({cpu_model()}, {args.rounds} rounds):")
    for tree, m in medians.items():
        print(tree, {k: round(v, 2) for k, v in m.items()})


if __name__ == "__main__":
    main()
