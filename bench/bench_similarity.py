"""Benchmark: KNN match similarity, blocked (embinit) vs the straightforward full-matrix computation.

- 50,257 x 512 against 50,257 x 512 (GPT-2's vocabulary at the post's D), K=10, inner product:
  embinit's blocked exact top-k. The full score matrix would be 50,257^2 x 4 B = 10.1 GB per space
  (what the post's code materialized), so the full-matrix version is not run at this size.
- At a size where the full matrix fits (default N=12,000: 576 MB per space), both are run, their
  per-token scores compared, and time and peak memory measured.

Each case runs in a fresh subprocess, so its peak resident memory (psutil, sampled every 10 ms, and
getrusage's ru_maxrss) is its own; "extra" is the peak minus the resident size just before the call
(the inputs and the torch runtime excluded). Wall time and process CPU time are both reported: the
machine may be shared, and CPU time / threads is what a dedicated machine would take.

    python bench/bench_similarity.py [--threads 2] [--n-full 12000] [--out bench/results/similarity.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from machine import cpu_model  # bench/machine.py


def _tables(n: int, d: int, seed: int):
    import torch
    g = torch.Generator().manual_seed(seed)
    # two independent "trained-like" spaces with shared structure: a common part plus noise
    common = torch.randn(n, d, generator=g)
    return common + 0.8 * torch.randn(n, d, generator=g), common + 0.8 * torch.randn(n, d, generator=g)


def full_matrix_similarity(a, b, k: int):
    """The straightforward version: the whole N x N score matrix per space, then top-k."""
    import torch

    def neighbours(x):
        s = x @ x.T
        s.fill_diagonal_(float("-inf"))
        return torch.topk(s, k, dim=1).indices

    ia, ib = neighbours(a), neighbours(b)
    inter = (ia.unsqueeze(2) == ib.unsqueeze(1)).sum(dim=(1, 2)).double()
    return inter / (2 * k - inter)


def child(case: str, n: int, d: int, k: int, threads: int) -> dict:
    import psutil
    import torch

    from embinit.analysis.similarity import knn_match_similarity

    torch.set_num_threads(threads)
    a, b = _tables(n, d, 0)
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.01)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    w0, c0 = time.perf_counter(), time.process_time()
    if case == "blocked":
        scores = knn_match_similarity(a, b, k=k).per_token
    else:
        scores = full_matrix_similarity(a, b, k)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    stop.set()
    t.join()
    torch.save(scores, os.environ["BENCH_SCORES"])
    return {"case": case, "n": n, "d": d, "k": k, "threads": threads, "wall_s": wall, "cpu_s": cpu,
            "mean_similarity": float(scores.mean()), "rss_before_mb": base / 2**20,
            "peak_rss_mb": peak[0] / 2**20, "peak_extra_mb": (peak[0] - base) / 2**20,
            "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "load_avg_1m_after": os.getloadavg()[0]}


def run_case(case: str, n: int, d: int, k: int, threads: int, scores_path: Path) -> dict:
    env = {**os.environ, "BENCH_SCORES": str(scores_path), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, __file__, "--child", case, "--n", str(n), "--d", str(d),
                          "--k", str(k), "--threads", str(threads)], env=env, capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"case {case} n={n} failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(res), flush=True)
    return res


def machine(threads: int) -> dict:
    import psutil
    import torch
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": threads,
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1), "torch": torch.__version__,
            "load_avg_1m_start": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", choices=("blocked", "full"))
    ap.add_argument("--n", type=int, default=50257)
    ap.add_argument("--n-full", type=int, default=12000)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench/results/similarity.json")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.n, args.d, args.k, args.threads)))
        return
    import torch
    tmp = Path(args.out).with_suffix(".scores")
    tmp.mkdir(parents=True, exist_ok=True)
    result = {"benchmark": "knn_match_similarity", "machine": machine(args.threads)}
    result["large_blocked"] = run_case("blocked", args.n, args.d, args.k, args.threads, tmp / "large.pt")
    result["full_matrix_gb_at_large_n"] = args.n ** 2 * 4 / 1e9
    small_b = run_case("blocked", args.n_full, args.d, args.k, args.threads, tmp / "small_blocked.pt")
    small_f = run_case("full", args.n_full, args.d, args.k, args.threads, tmp / "small_full.pt")
    same = torch.equal(torch.load(tmp / "small_blocked.pt"), torch.load(tmp / "small_full.pt"))
    result["small"] = {"blocked": small_b, "full": small_f, "identical_per_token_scores": same,
                       "full_over_blocked_wall": small_f["wall_s"] / small_b["wall_s"],
                       "full_over_blocked_peak_extra":
                           small_f["peak_extra_mb"] / max(small_b["peak_extra_mb"], 1e-9)}
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))


if __name__ == "__main__":
    main()
