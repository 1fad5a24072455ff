"""Fused-trial benchmark on CPU: a group of G same-shape trials of one task (--task: the synthetic
translation, classification or LM task, or a real one with --data-dir) trained as one fused model
(embinit.train.fused) against the same G trials run one after the other (run_trial), in one process.

For G in --groups (default 2 4 8): the seeds 0..G-1 of one synthetic grid point, D and
sizes from the flags, dropout --dropout (0.1), --epochs epochs, no BLEU decoding (training and validation only, so
the step is what is measured). Alternates separate and fused per G and keeps the best of --repeats.
Reports wall seconds of each, fused/separate throughput ratio, and the padding cost: token slots the
fused step computes (every member padded to the group's longest batch and sequence) against the
slots the separate trials compute (each padded to its own longest) and the real tokens.

    python bench/bench_fused.py [--task translation|classification|lm] [--groups 2 4 8] [--d-model 64]
Results: bench/results/fused_cpu.json (translation), fused_cpu_<task>.json (with lscpu's model name).

GPU: section (d) of bench/bench_gpu.py (fused groups of 4, 8, 16, 32 on Multi30k at D=300 against as
many separate processes under MPS); not yet run on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from embinit.config import TrialConfig
from embinit.train import run_trial
from embinit.train.fused import run_fused
from machine import cpu_model  # bench/machine.py

SYNTHETIC = ("translation", "classification", "lm")


def configs(g: int, args) -> list[TrialConfig]:
    task = f"synthetic_{args.task}" if args.task in SYNTHETIC else args.task
    extra = {"data_dir": args.data_dir} if args.data_dir else {}
    return [TrialConfig(task=task, seed=s, threads=args.threads, epochs=args.epochs, d_model=args.d_model,
                        heads=args.heads, ff_dim=2 * args.d_model, layers=args.layers, batch_size=args.batch_size,
                        max_train_examples=args.examples, dropout=args.dropout, extras={"val_bleu": False}, **extra)
            for s in range(g)]


def measure(g: int, args, cache: str) -> dict:
    cfgs = configs(g, args)
    best = {"separate_s": float("inf"), "fused_s": float("inf")}
    for _ in range(args.repeats):
        t = time.perf_counter()
        sep = [run_trial(c, cache_dir=cache) for c in cfgs]
        best["separate_s"] = min(best["separate_s"], time.perf_counter() - t)
        t = time.perf_counter()
        fused = run_fused(cfgs, cache_dir=cache)
        best["fused_s"] = min(best["fused_s"], time.perf_counter() - t)
    pad = fused[0].info["execution"]["padding"]
    train_sep = sum(h["time_s"] for r in sep for h in r.history)
    train_fused = sum(h["time_s"] for h in fused[0].history)
    return {"group": g, **best, "speedup": best["separate_s"] / best["fused_s"],
            "train_step_speedup": train_sep / train_fused,
            "tokens_per_s_separate": sum(h["tokens_per_s"] * h["time_s"] for r in sep for h in r.history) / train_sep,
            "tokens_per_s_fused": sum(h["tokens_per_s"] * h["time_s"] for r in fused for h in r.history) / train_fused,
            "padding": pad, "fused_slots_over_separate": pad["fused_slots"] / pad["separate_slots"],
            "real_share_fused": pad["real_tokens"] / pad["fused_slots"],
            "real_share_separate": pad["real_tokens"] / pad["separate_slots"],
            "max_val_loss_diff": max(abs(a["val/loss"] - b["val/loss"]) for r, f in zip(sep, fused)
                                     for a, b in zip(r.history, f.history))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="translation",
                    help="translation, classification, lm (the synthetic tasks) or a real task (sst2, multi30k, ...)")
    ap.add_argument("--data-dir", default=None, help="a real task's folder (e.g. ../shared/data/sst2)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=None, help="default: the task's")
    ap.add_argument("--groups", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default=None, help="default: bench/results/fused_cpu[_<task>].json")
    args = ap.parse_args()
    args.out = args.out or f"bench/results/fused_cpu{'' if args.task == 'translation' else '_' + args.task}.json"
    args.data_dir = os.path.abspath(args.data_dir) if args.data_dir else None
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as cache:
        run_trial(configs(1, args)[0], cache_dir=cache)  # warm the data cache and the kernels
        rows = [measure(g, args, cache) for g in args.groups]
    load = {"before": load_before, "after": os.getloadavg()}   # (1, 5, 15 min), the machine may be shared
    print(f"CPU: {cpu_model()}, {args.threads} threads, {args.task}, D={args.d_model}, {args.layers} "
          f"layers per stack, {args.examples} examples x {args.epochs} epoch(s); "
          f"load average before {load_before[0]:.2f}, after {load['after'][0]:.2f} (1 min)")
    print("| G | separate s | fused s | wall ratio | train-step ratio | fused slots / separate | real share fused |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['group']} | {r['separate_s']:.1f} | {r['fused_s']:.1f} | {r['speedup']:.2f}x | "
              f"{r['train_step_speedup']:.2f}x | {r['fused_slots_over_separate']:.3f} | {r['real_share_fused']:.3f} |")
    Path(args.out).write_text(json.dumps({"cpu": cpu_model(), "args": vars(args), "torch": torch.__version__,
                                          "load_average": load, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
