"""Profile of the trainer's step on the GPU (issue 19: where a speed target is missed, profile the step):
the ops that take the GPU's time and the host's, per precision, from `torch.profiler` over a few steps of
bench_gpu's one-trial run (Multi30k, D=300).

    PYTHONPATH=.:bench python3 bench/profile_gpu_step.py --data DIR/multi30k [--steps 20] [--out DIR] [--graphs]

`--graphs` profiles the CUDA-graphed step (`cuda_graphs`, embinit.train.graphed) instead, its buckets
captured before the profiled steps, into profile_<precision>_graphs.txt (CUDA only).
Writes <out>/profile_<precision>.txt (out: --out, else $OUT, else bench/results/gpu) and prints, per
precision: tokens/s under the profiler, kernel launches and host time per step, and the top ops.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.profiler import ProfilerActivity, profile

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_gpu as bg  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("EMBINIT_BENCH_MULTI30K"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--precision", nargs="+", default=["bf16", "fp32"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(HERE / "results" / "gpu"))
    ap.add_argument("--graphs", action="store_true", help="profile the CUDA-graphed step (CUDA only)")
    args = ap.parse_args(argv)
    if args.graphs and args.device == "cpu":
        ap.error("--graphs needs a CUDA device: CUDA graphs do not exist on the CPU")
    sv, tv, pairs, source = bg.load(SimpleNamespace(data=args.data, smoke=args.data is None),
                                   None if args.data else 600)
    device, out = torch.device(args.device), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    for p in args.precision:
        prof = profile(activities=acts)                         # the timed steps alone: no set-up, no warm-up
        r = bg.embinit_trial(300, 10, sv, tv, pairs, args.steps, p, device, around=prof, graphs=args.graphs)
        avg = prof.key_averages()
        steps = r["steps"]
        launches = sum(e.count for e in avg if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
        graph_launches = sum(e.count for e in avg if e.key == "cudaGraphLaunch")
        head = (f"{p}{' graphed' if args.graphs else ''}: {r['tokens'] / r['seconds']:.0f} tokens/s under the "
                f"profiler ({source}, {device}, {steps} steps); kernel launches per step {launches / steps:.0f}; "
                + (f"graph launches per step {graph_launches / steps:.2f}; " if args.graphs else "") +
                f"host time per step {sum(e.self_cpu_time_total for e in avg) / steps / 1e3:.1f} ms")
        text = "\n".join([head, avg.table(sort_by="cuda_time_total" if device.type == "cuda" else "cpu_time_total",
                                           row_limit=15, max_name_column_width=60),
                          avg.table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=60)])
        (out / f"profile_{p}{'_graphs' if args.graphs else ''}.txt").write_text(text + "\n")
        print(text, flush=True)


if __name__ == "__main__":
    main()
