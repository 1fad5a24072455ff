"""Kernel launches of one fused training step (forward and backward) as the group grows.

On a GPU a 3-layer model's step is bound by kernel launches, not FLOPs, so what a fused group buys
depends on how many launches grow with G. This counts the ATen operations that run a kernel (views and
allocations left out) in `fused.losses` + backward for G = 1, 2, 8, 16 members of each synthetic task
(D=16, 3 layers, dropout 0.1), and the dropout draws among them (one per member and dropout site,
each from the member's own generator: those cannot be shared). Deterministic: no timing, any machine.

    python bench/bench_fused_ops.py [--groups 1 2 8 16]  -> bench/results/fused_ops.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from embinit import task_registry
from embinit.config import TrialConfig
from embinit.train.lifecycle import make_task
from embinit.train.prepare import prepare
from machine import cpu_model  # bench/machine.py

FREE = {"view", "_unsafe_view", "slice", "select", "detach", "transpose", "unsqueeze", "squeeze", "expand",
        "permute", "t", "as_strided", "alias", "reshape", "empty", "split", "unbind"}
TASKS = ("synthetic_translation", "synthetic_classification", "synthetic_lm")


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.kernels = self.draws = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.kernels += name not in FREE
        self.draws += name == "random_"
        return func(*args, **(kwargs or {}))


CONFIG = {"threads": 1, "epochs": 1, "max_train_examples": 200, "d_model": 16, "heads": 2, "ff_dim": 32,
          "layers": 3, "dropout": 0.1}


def count(task: str, g: int, cache: str, config: dict | None = None) -> dict:
    """Kernels and dropout draws of one fused step of seeds 0..g-1 of `task` (`config`: TrialConfig
    fields, default CONFIG); tests/test_train_fused.py holds their growth with g."""
    setups = [prepare(TrialConfig(task=task, seed=s, **(CONFIG if config is None else config)), cache)
              for s in range(g)]
    t = make_task(setups[0])
    batches = [make_task(s).train_batches(torch.Generator().manual_seed(i))[0] for i, s in enumerate(setups)]
    fused = task_registry.kind_code(t.kind, "fused")([s.model for s in setups], [s.dropout_generator for s in setups])
    fused.train()
    losses, counter = fused.losses, Count()

    def counted(*args):
        with counter:
            out = losses(*args)
            out.sum().backward()
        return out.detach()

    fused.losses = counted
    t.fused_loss(fused, batches)   # stacks the batches on the host (not counted), then the counted step
    return {"task": task, "g": g, "kernels": counter.kernels, "draws": counter.draws}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 2, 8, 16], help="1 is always measured")
    ap.add_argument("--out", default="bench/results/fused_ops.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as cache:
        rows = [count(task, g, cache) for task in TASKS for g in sorted({1, *args.groups})]
    print("| task | G | kernels per fused step | of them dropout draws | × the G=1 step | G one-member steps / fused |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        one = next(x for x in rows if x["task"] == r["task"] and x["g"] == 1)
        r["vs_one"], r["separate_over_fused"] = r["kernels"] / one["kernels"], r["g"] * one["kernels"] / r["kernels"]
        print(f"| {r['task']} | {r['g']} | {r['kernels']} | {r['draws']} | {r['vs_one']:.2f} | "
              f"{r['separate_over_fused']:.1f} |")
    Path(args.out).write_text(json.dumps({"cpu": cpu_model(), "torch": torch.__version__, "argv": sys.argv[1:],
                                          "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
