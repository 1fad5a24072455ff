"""Benchmark: what keying file inputs by content (embinit.file_inputs) costs when a spec is planned.

One run, one process, a spec of 2 tasks x 3 inits x 2 ablation points x 50 seeds (600 trials) whose
pretrained file is GloVe 6B 50d (171 MB of text):
- *path*: the keys as before (file inputs by their path: `key_values` replaced by the identity);
- *cold*: content keys with an empty cache root and no memo (the file is hashed once);
- *disk memo*: content keys in a fresh process (simulated: the in-process memo cleared), the digest read
  from `<cache root>/digests/`;
- *warm*: content keys again in the same process.
Each is the best of `--repeats` plans (cold: a new cache root each time). The file is read once before
timing so every measurement sees the same (warm) OS page cache.

Usage: python bench/bench_trial_keys.py [--glove PATH] [--repeats 3]
       (or set EMBINIT_BENCH_GLOVE). Writes bench/results/trial_keys.json and prints a markdown row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from embinit import file_inputs
from embinit.spec import load_spec
from machine import cpu_model  # bench/machine.py


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--glove", default=os.environ.get("EMBINIT_BENCH_GLOVE", "/work/assets/glove.6B.50d.txt"))
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args()


def spec(glove: str):
    return load_spec({"name": "keys", "tasks": ["multi30k", "sst2"], "seeds": 50, "pretrained": glove,
                      "inits": ["glove", "glove+standardize", "xavier"], "axes": {"pos_encoding": [True, False]}})


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(s, repeats: int) -> dict[str, float]:
    """Best seconds per plan of `s` in each mode."""
    real = file_inputs.key_values
    out = {"path": [], "cold": [], "disk_memo": [], "warm": []}
    for _ in range(repeats):
        file_inputs.key_values = dict  # the old keys: file inputs by path
        out["path"].append(timed(s.plan))
        file_inputs.key_values = real
        with tempfile.TemporaryDirectory() as root:
            os.environ["EMBINIT_CACHE_DIR"] = root
            file_inputs._memo.clear()
            out["cold"].append(timed(s.plan))
            file_inputs._memo.clear()
            out["disk_memo"].append(timed(s.plan))
            out["warm"].append(timed(s.plan))
    return {k: min(v) for k, v in out.items()}


def main() -> int:
    args = parse_args()
    glove = Path(args.glove)
    if not glove.is_file():
        print(f"no GloVe file at {glove}; pass --glove or set EMBINIT_BENCH_GLOVE", file=sys.stderr)
        return 2
    glove.read_bytes()  # warm the OS page cache
    import embinit.config as config
    config.key_values = lambda d: file_inputs.key_values(d)  # route through the module attribute
    s = spec(str(glove))
    n = len(s.plan())
    best = measure(s, args.repeats)
    result = {"cpu": cpu_model(), "cores": os.cpu_count(), "trials": n, "file_mb": glove.stat().st_size / 1e6,
              "seconds": best, "ratios": {k: best[k] / best["path"] for k in best}}
    out = Path(__file__).resolve().parent / "results" / "trial_keys.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    r = result["ratios"]
    print(f"| `bench_trial_keys.py`: planning {n} trials, pretrained = GloVe 6B 50d ({result['file_mb']:.0f} MB) "
          f"| content keys vs path keys: warm {r['warm']:.2f}x, disk memo {r['disk_memo']:.2f}x, cold (one hash) "
          f"{r['cold']:.1f}x ({best['cold'] - best['path']:.2f} s) | hashed once per file ({result['cpu']}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
