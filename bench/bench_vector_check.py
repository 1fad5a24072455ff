"""Benchmark: the peak memory of the spec's check of a word-vector file (embinit.spec.vector_files), as it
read the file before (`vectors.words`: every word held, then dropped) and as it reads it now
(`vectors.read_through`: the same parse and errors, no word held).

A GloVe-format text file of `--words` distinct words (default 500,000; `--dim` values per row, one row's
values repeated: the check parses no value) is generated in a temporary folder. Each way reads it in a
fresh process, `--repeats` times, alternating: its peak RSS (`ru_maxrss`: the whole process's, and how
far the read raised it above the process's once embinit is imported), the peak of Python's allocations
(`tracemalloc`, in a separate process: tracing slows the read) and the wall time of the untraced read.
Reported: each figure, before / after, and their ratio within this one run (the RSS the read adds:
their difference, the read now adding next to nothing).

Usage: python bench/bench_vector_check.py [--words 500000] [--dim 50] [--repeats 2]
Writes bench/results/vector_check.json (with lscpu's model) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from machine import append_result, cpu_model  # noqa: E402  (bench/machine.py)

WAYS = {"before": "words", "after": "read_through"}


def write_file(path: Path, n: int, dim: int) -> int:
    """A GloVe text file of `n` distinct words of 3 to 12 letters (as a real vocabulary's); its size."""
    values = (" " + " ".join(f"{(i % 17 - 8) / 10:.4f}" for i in range(dim)) + "\n").encode()
    letters = b"abcdefghijklmnopqrstuvwxyz"
    with open(path, "wb") as f:
        for i in range(n):
            stem = bytes(letters[(i * 7 + k) % 26] for k in range(2 + i % 10))
            f.write(stem + b"%d" % i + values)
    return path.stat().st_size


def _one(way: str, path: str, traced: bool) -> dict:
    """In this (fresh) process: read `path` the way `way`; what it cost."""
    import resource
    import tracemalloc

    from embinit.init import vectors
    fn = getattr(vectors, way)
    base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    fn(path)
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"seconds": seconds, "rss_mb": (peak_kb - base_kb) / 1024, "rss_total_mb": peak_kb / 1024}
    if traced:
        out["traced_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
    return out


def measure(way: str, path: Path) -> dict:
    """Peak RSS and wall time from an untraced run, the peak of Python's allocations from a traced one."""
    def run(traced: bool) -> dict:
        cmd = [sys.executable, __file__, "--one", way, str(path)] + (["--traced"] if traced else [])
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    plain, traced = run(False), run(True)
    return {**plain, "traced_mb": traced["traced_mb"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=500_000)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--one", nargs=2, metavar=("WAY", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(*args.one, traced=args.traced)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vectors.txt"
        size = write_file(path, args.words, args.dim)
        runs: dict[str, list[dict]] = {name: [] for name in WAYS}
        for _ in range(args.repeats):
            for name, way in WAYS.items():
                runs[name].append(measure(way, path))
    best = {name: {k: min(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    ratio = {k: best["before"][k] / max(best["after"][k], 1e-9) for k in best["before"]}
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model(),
              "words": args.words, "dim": args.dim, "file_mb": size / 2**20, "runs": runs, "best": best,
              "ratio_before_over_after": ratio}
    append_result(ROOT / "bench" / "results" / "vector_check.json", result)
    print(f"{args.words:,} words, {size / 2**20:.0f} MB, {cpu_model()} (best of {args.repeats})\n")
    print("| read | peak RSS, process (MB) | added by the read (MB) | peak traced (MB) | wall (s) |\n"
          "|---|---|---|---|---|")
    for name, way in WAYS.items():
        b = best[name]
        print(f"| {name}: vectors.{way} | {b['rss_total_mb']:.1f} | {b['rss_mb']:.1f} | {b['traced_mb']:.2f} | "
              f"{b['seconds']:.2f} |")
    less = best["before"]["rss_mb"] - best["after"]["rss_mb"]
    print(f"| before / after | {ratio['rss_total_mb']:.2f}x | {less:.1f} MB less | {ratio['traced_mb']:.0f}x | "
          f"{ratio['seconds']:.2f}x |")


if __name__ == "__main__":
    main()
