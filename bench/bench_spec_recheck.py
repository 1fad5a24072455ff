"""Benchmark: the spec's check of a word-vector file in a process after the first (a rerun, a dry run, a
restarted service), as before (every process read the file through, `vectors.read_through`) and now (a
file found sound is marked on disk by its content: embinit.spec.vector_files).

A GloVe-format text file of `--words` words (`bench_vector_check.write_file`) is generated in a temporary
folder. Each way runs in a fresh process, `--repeats` times: `before` reads it through; `first` is the
check now with an empty cache root (hash, read through, mark); `later` is the check now with the cache
root `first` left (the digest memo and the mark). Reported: wall seconds of each (best of the repeats)
and before / later, a ratio within this one run.

Usage: python bench/bench_spec_recheck.py [--words 500000] [--dim 50] [--repeats 2]
Writes bench/results/spec_recheck.json (with lscpu's model) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_vector_check import write_file  # noqa: E402
from machine import append_result, cpu_model  # noqa: E402  (bench/machine.py)

WAYS = ("before", "first", "later")


def _one(way: str, path: str) -> dict:
    """In this (fresh) process: check `path` the way `way`; its wall seconds and what it found."""
    from embinit.init import vectors
    from embinit.spec.vector_files import vector_file_problems
    t0 = time.perf_counter()
    if way == "before":
        vectors.read_through(path)
        found = []
    else:
        found = vector_file_problems([("pretrained.glove", path)])
    return {"seconds": time.perf_counter() - t0, "problems": len(found)}


def measure(way: str, path: Path, cache: Path) -> dict:
    env = {**os.environ, "EMBINIT_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, __file__, "--one", way, str(path)]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=500_000)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--one", nargs=2, metavar=("WAY", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(*args.one)))
        return
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vectors.txt"
        size = write_file(path, args.words, args.dim)
        for i in range(args.repeats):
            cache = Path(tmp) / f"cache{i}"   # empty for `first`, as `first` left it for `later`
            for way in WAYS:
                runs[way].append(measure(way, path, cache))
    assert all(r["problems"] == 0 for rs in runs.values() for r in rs), runs
    best = {way: min(r["seconds"] for r in rs) for way, rs in runs.items()}
    ratio = best["before"] / max(best["later"], 1e-9)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model(),
              "words": args.words, "dim": args.dim, "file_mb": size / 2**20, "runs": runs, "best_s": best,
              "ratio_before_over_later": ratio}
    append_result(ROOT / "bench" / "results" / "spec_recheck.json", result)
    print(f"{args.words:,} words, {size / 2**20:.0f} MB, {cpu_model()} (best of {args.repeats}, fresh processes)\n")
    print("| check | wall (s) |\n|---|---|")
    for way, what in (("before", "before: read through (every process)"),
                      ("first", "now, first process: hash, read through, mark"),
                      ("later", "now, a later process: the mark")):
        print(f"| {what} | {best[way]:.4f} |")
    print(f"| before / later | {ratio:.0f}x |")


if __name__ == "__main__":
    main()
