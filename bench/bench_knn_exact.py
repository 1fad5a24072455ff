"""Benchmark: exact float64 neighbours (issue 23) against the tolerance rule they replace.

The reference is `embinit/analysis/neighbours.py` as of commit 305a929 (read with `git show`). Both run
the same K=10 inner-product search on the same table, interleaved (old, new, old, new, ...), in this
process, and the best time of each is compared: the ratio is what the figure reports (the machine is
shared; absolute seconds are not comparable across runs). Also counted: how many rows the new search
recomputes in full in float64, and, on the first 5,000 words of a GloVe file when $EMBINIT_GLOVE names
one, how many rows' neighbour lists differ from float64 brute force under each rule.

    python bench/bench_knn_exact.py [--n 12000] [--d 512] [--reps 3] [--threads 2] [--out bench/results/knn_exact.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model  # bench/machine.py

ROOT = Path(__file__).resolve().parents[1]
OLD_COMMIT = "305a929"


def old_module():
    src = subprocess.run(["git", "show", f"{OLD_COMMIT}:embinit/analysis/neighbours.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_neighbours.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_neighbours", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def differing_rows(x, knn_fn, neighbours: str, k: int = 10) -> dict:
    import torch
    x64 = x.double()
    if neighbours == "cosine":
        x64 = x64 / x64.norm(dim=1, keepdim=True)
    s = x64 @ x64.T
    s.fill_diagonal_(float("-inf"))
    ref = torch.sort(-s, dim=1, stable=True).indices[:, :k]
    got = knn_fn(x, k, neighbours)[1]
    return {"order_or_set": int((got != ref).any(1).sum()),
            "set": sum(set(a) != set(b) for a, b in zip(got.tolist(), ref.tolist()))}


def glove_rows(n: int = 5000):
    import torch
    path = os.environ.get("EMBINIT_GLOVE")
    if not path or not Path(path).is_file():
        return None
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if len(rows) >= n:
                break
            rows.append([float(v) for v in line.split()[1:]])
    return torch.tensor(rows, dtype=torch.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=12000)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "knn_exact.json"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from embinit.analysis import neighbours as new
    torch.set_num_threads(args.threads)
    old = old_module()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.n, args.d, generator=g) + 0.8 * torch.randn(args.n, args.d, generator=g)
    times = {"old": [], "new": []}
    for _ in range(args.reps):
        for name, mod in (("old", old), ("new", new)):
            t0 = time.perf_counter()
            mod.knn(x, 10)
            times[name].append(time.perf_counter() - t0)
    full, original = [0], new._full_rows
    new._full_rows = lambda raw, rows, *a: (full.__setitem__(0, full[0] + len(rows)), original(raw, rows, *a))[1]
    new.knn(x, 10)
    new._full_rows = original
    out = {"benchmark": "knn_exact", "cpu": cpu_model(), "threads": args.threads, "n": args.n, "d": args.d,
           "k": 10, "times_s": times, "ratio_new_over_old": min(times["new"]) / min(times["old"]),
           "rows_recomputed_in_full": full[0], "load_avg_1m": os.getloadavg()[0]}
    glove = glove_rows()
    if glove is not None:
        out["glove_5000_rows_differing_from_float64"] = {
            nb: {"old": differing_rows(glove, old.knn, nb), "new": differing_rows(glove, new.knn, nb)}
            for nb in ("dot", "cosine")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
