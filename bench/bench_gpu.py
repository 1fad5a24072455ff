"""GPU benchmark: embinit's trainer on Multi30k at the paper's D=300 setting, on one GPU.

    python bench/bench_gpu.py --data DIR/multi30k [--out DIR]      # on the GPU machine
    python bench/bench_gpu.py --smoke                               # tiny, on CPU (the test suite runs it)

DIR/multi30k holds train.de/train.en (Multi30k's files; without --data, synthetic sentences with its
lengths are used and the JSON says so). It prints one table and writes the full results to
`<out>/bench_gpu.json` (out: --out, else $OUT, else bench/results):
- (a) one trial alone, fp32 and bf16: tokens/s (non-pad source + target tokens), s/epoch, achieved
  TFLOP/s (matmul FLOPs executed, forward x3) and its share of the bf16 matmul peak measured in this run;
  with `--graphs`, also the same trial with its step in CUDA graphs (`embinit.train.graphed`, the
  `cuda_graphs` trial setting) right after the eager one: tokens/s, the ratio to eager, the buckets
  captured and the one-off seconds each took (warm-up step and capture, in an untimed first pass over
  the batches). On a CPU device the graphed rows are skipped, with the reason in the JSON;
- (b) N = 1, 4, 8, 16 trials at once, each its own process as under Ray, with CUDA MPS on and off:
  aggregate tokens/s and trial-epochs per GPU-hour. MPS on: a daemon started by this script in its own
  pipe directory (stopped afterwards); off: the trials point at a pipe directory without a daemon. The
  processes warm up (and with `--graphs` capture) first, then wait for each other, so their timed steps
  overlap. With `--graphs` on CUDA, the same N with MPS on again, each process's step in CUDA graphs
  (rows marked graphed: what many graphed trials per GPU give together);
- (c) a plain PyTorch loop (nn.Transformer, padded random batches, the textbook recipe) of the same
  sizes, on the same device and precision, run beside (a);
- (d) fused groups of G = 4, 8, 16, 32 trials (`--fused`) in one process, the trainer's own fused step
  (`embinit.train.fused_group.FusedGroup`, losses read every SYNC_EVERY steps), each member its own
  seed, dropout stream and data order, in the faster precision of (b): aggregate tokens/s, trial-epochs
  per GPU-hour, achieved TFLOP/s (the members' own matmul FLOPs, forward x3: padding is not counted as
  work) and its share of the bf16 peak, the padding overhead (token slots computed against real tokens
  and against the slots of the same batches run separately), and the ratio to G separate processes
  under MPS (rows (b) for every G, MPS on where available) and to the best row of (b).
Each trial process runs the trainer's own epoch loop (`embinit.train.loop.train_epoch`: losses read every
SYNC_EVERY steps on the GPU) over `--steps` batches of a shuffled Multi30k epoch (all 453 by default);
`--steps 100` keeps the whole run within a 10-minute device call.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import bench_trainer as bt  # noqa: E402  (data, the plain model, FLOP accounting)
from embinit.models import ModelConfig, build_model, set_dropout_generator  # noqa: E402
from embinit.train.callbacks import TrainContext  # noqa: E402
from embinit.train.fused_group import FusedGroup, Lane  # noqa: E402
from embinit.train.graphed import GraphedStep  # noqa: E402
from embinit.train.loop import autocast_for, sync_interval, train_epoch  # noqa: E402
from embinit.train.lifecycle import make_optimizer  # noqa: E402


def settings(args) -> dict:
    if args.smoke:
        return {"d": 32, "heads": 4, "steps": 6, "concurrency": [1, 2], "precisions": ["fp32", "bf16"],
                "train_pairs": 600, "fused": [2, 3], "graphs": args.graphs}
    return {"d": 300, "heads": 10, "steps": args.steps, "concurrency": args.concurrency,
            "precisions": ["fp32", "bf16"], "train_pairs": None, "fused": args.fused, "graphs": args.graphs}


def load(args, n_pairs):
    folder = Path(args.data) if args.data else None
    if folder is not None and not (folder / "train.de").is_file():
        sys.exit(f"--data {folder}: no train.de there (need Multi30k's train/val .de/.en files)")
    if folder is None and args.smoke:
        (train, val), source = tiny_pairs(n_pairs), "synthetic (tiny, --smoke)"
    else:
        (train, val), source = bt.load_pairs(folder)
    train = train[:n_pairs] if n_pairs else train
    sv, tv, train_ids, _ = bt.numericalize(train, val[:10])
    return sv, tv, train_ids, source


def tiny_pairs(n):
    import random
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    def sent():
        return [rng.choice(words) for _ in range(rng.randint(4, 14))]
    return [(sent(), sent()) for _ in range(n)], [(sent(), sent()) for _ in range(10)]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# one trial ----------------------------------------------------------------------------------------------
def embinit_trial(d, heads, sv, tv, pairs, steps, precision, device, around=None, graphs=False) -> dict:
    """One epoch (`steps` batches) of the trainer's loop; tokens, seconds and matmul FLOPs. `around`: a
    context manager entered for the timed steps alone (bench/profile_gpu_step.py passes its profiler).
    `graphs`: the step in CUDA graphs (`GraphedStep`); an untimed first pass over the batches captures
    every bucket they need (its cost is returned per bucket), then the same batches are timed."""
    ac = autocast_for(precision, device)
    g = torch.Generator().manual_seed(0)
    model = build_model("translation", {"src": torch.randn(len(sv), d, generator=g) * 0.05,
                                        "tgt": torch.randn(len(tv), d, generator=g) * 0.05},
                        ModelConfig(d_model=d, heads=heads, layers=bt.LAYERS, ff_dim=bt.FF), generator=g)
    model.to(device)
    drop = torch.Generator(device=device).manual_seed(1)
    set_dropout_generator(model, drop)
    task = bt.translation_task(pairs, tv, device, ac)
    batches = task.train_batches(torch.Generator().manual_seed(0))
    batches = batches[:steps] if steps else batches
    opt = make_optimizer(list(model.parameters()), 2e-4, capturable=graphs)
    ctx = TrainContext(cfg=None, model=model, data=task.data, out_dir=None)
    step = GraphedStep(model, opt, drop, bt.BATCH, precision) if graphs else None
    warm = time.perf_counter()
    train_epoch(model, batches if graphs else batches[:3], task, opt, ctx, [], ac, step=step)   # warm-up
    sync(device)
    warm = time.perf_counter() - warm
    with around if around is not None else contextlib.nullcontext():
        start = time.perf_counter()
        stats = train_epoch(model, batches, task, opt, ctx, [], ac, step=step)
        sync(device)
        seconds = time.perf_counter() - start
    rows = sum(b["n_targets"] for b in batches)
    fl = sum(bt.flops(b, d, len(tv), 0, True) for b in batches) + 3 * 2 * rows * d * len(tv)
    out = {"tokens": stats.tokens, "seconds": seconds, "steps": len(batches), "flops": fl,
           "loss": stats.loss, "full_epoch_steps": len(task.train_batches(torch.Generator().manual_seed(0)))}
    if step is not None:
        out.update(warmup_seconds=warm, buckets=len(step.capture_seconds),
                   capture_seconds={"x".join(map(str, k)): v for k, v in step.capture_seconds.items()})
    return out


def plain_trial(d, heads, sv, tv, pairs, steps, precision, device) -> dict:
    """The textbook loop (bench_trainer.PlainTransformer) over the same number of batches."""
    ac = autocast_for(precision, device)
    torch.manual_seed(0)
    model = bt.PlainTransformer(len(sv), len(tv), d, heads).to(device)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    opt = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.9, 0.98), eps=1e-9)
    n = steps or len(pairs) // bt.BATCH
    batches = [{k: v.to(device) for k, v in b.items() if torch.is_tensor(v) and k in ("src", "tgt_in", "tgt_out")}
               for b in bt.plain_batches(pairs, n + 3)]
    for b in batches[:3]:
        bt.plain_step(model, opt, b, ac)
    sync(device)
    start = time.perf_counter()
    for b in batches[3:]:
        bt.plain_step(model, opt, b, ac)
    sync(device)
    seconds = time.perf_counter() - start
    tokens = sum(int((b["src"] != 0).sum() + (b["tgt_in"] != 0).sum()) for b in batches[3:])
    fl = sum(bt.flops(b, d, len(tv), b["tgt_out"].numel(), False) for b in batches[3:])
    return {"tokens": tokens, "seconds": seconds, "steps": n, "flops": fl}


def fused_trial(g, d, heads, sv, tv, pairs, steps, precision, device) -> dict:
    """`steps` batches of G trials trained as one fused group; tokens, seconds, FLOPs and padding."""
    ac = autocast_for(precision, device)
    task = bt.translation_task(pairs, tv, device, ac)
    lanes, batches = [], []
    for i in range(g):
        gen = torch.Generator().manual_seed(i)
        model = build_model("translation", {"src": torch.randn(len(sv), d, generator=gen) * 0.05,
                                            "tgt": torch.randn(len(tv), d, generator=gen) * 0.05},
                            ModelConfig(d_model=d, heads=heads, layers=bt.LAYERS, ff_dim=bt.FF), generator=gen)
        model.to(device)
        drop = torch.Generator(device=device).manual_seed(1000 + i)
        set_dropout_generator(model, drop)
        params = [p for p in model.parameters() if p.requires_grad]
        lanes.append(Lane(model=model, generator=drop, optimizer=make_optimizer(params, 2e-4), params=params,
                          ctx=TrainContext(cfg=None, model=model, data=task.data, out_dir=None)))
        own = task.train_batches(torch.Generator().manual_seed(i))   # each member its own data order
        batches.append(own[:steps] if steps else own)
    group, every = FusedGroup(lanes, 2e-4, task), sync_interval(device)
    group.train_epoch([b[:3] for b in batches], ac, every)           # warm-up: kernels, allocator
    sync(device)
    pad = {"real_tokens": 0, "separate_slots": 0, "fused_slots": 0}
    start = time.perf_counter()
    diverged = group.train_epoch(batches, ac, every, pad)
    sync(device)
    seconds = time.perf_counter() - start
    fl = sum(bt.flops(b, d, len(tv), 0, True) + 3 * 2 * b["n_targets"] * d * len(tv) for own in batches for b in own)
    return {"g": g, "tokens": pad["real_tokens"], "seconds": seconds, "steps": len(batches[0]), "flops": fl,
            "padding": pad, "diverged": len(diverged), "loss": sum(x.mean_loss for x in lanes) / g,
            "full_epoch_steps": len(task.train_batches(torch.Generator().manual_seed(0)))}


def fused_rows(s, sv, tv, pairs, device, peak, precision) -> list[dict]:
    """(d): each fused group G's throughput, FLOPs and padding (compare_fused adds the ratios to (b))."""
    out = []
    for g in s["fused"]:
        r = fused_trial(g, s["d"], s["heads"], sv, tv, pairs, s["steps"], precision, device)
        pad = r["padding"]
        row = {**r, "precision": precision, "tokens_per_s": r["tokens"] / r["seconds"],
               "trial_epochs_per_gpu_hour": g * r["steps"] / r["full_epoch_steps"] * 3600 / r["seconds"],
               "tflops": r["flops"] / r["seconds"] / 1e12, "peak_share": r["flops"] / r["seconds"] / peak,
               "slots_per_real_token": pad["fused_slots"] / pad["real_tokens"],
               "slots_vs_separate": pad["fused_slots"] / pad["separate_slots"]}
        out.append(row)
        print(f"(d) fused G={g}: {row['tokens_per_s']:.0f} tokens/s", file=sys.stderr, flush=True)
    return out


def compare_fused(rows, concurrent_rows) -> list[dict]:
    """Each fused row against G separate processes (MPS on where it ran) and the best row of (b), both
    eager (the graphed rows of (b) are another step, compared in their own rows)."""
    ok = [r for r in concurrent_rows if "error" not in r and not r.get("graphed")]
    best = max(ok, key=lambda r: r["tokens_per_s"], default=None)
    modes = {r["mps"] for r in ok}
    mode = "on" if "on" in modes else ("n/a" if "n/a" in modes else "off")
    out = []
    for row in rows:
        same = next((c for c in ok if c["n"] == row["g"] and c["mps"] == mode), None)
        out.append({**row, "vs_separate": {"mps": mode, "ratio": row["tokens_per_s"] / same["tokens_per_s"]}
                    if same else None,
                    "vs_best_separate": {"n": best["n"], "mps": best["mps"],
                                         "ratio": row["tokens_per_s"] / best["tokens_per_s"]} if best else None})
    return out


def matmul_peak(device, dtype=torch.bfloat16, sizes=(4096, 8192)) -> float:
    """Best dense matmul FLOP/s of this device in `dtype` (the ceiling the shares are taken of)."""
    if device.type != "cuda" and sizes == (4096, 8192):
        return bt.matmul_peak(dtype, torch.get_num_threads()) * 1e9
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        for _ in range(3):
            a @ b
        sync(device)
        reps, start = 20, time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(device)
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - start))
    return best


# concurrent trials -----------------------------------------------------------------------------------
class Barrier:
    """Entered before a trial process's timed steps: it marks itself ready in `folder` and waits (at most
    `limit` seconds) until all `n` processes are, so the timed steps of (b) overlap after every
    process's warm-up and capture."""

    def __init__(self, folder: str, n: int, limit: float = 300.0):
        self.folder, self.n, self.limit = Path(folder), n, limit

    def __enter__(self):
        (self.folder / f"ready-{os.getpid()}").touch()
        give_up = time.monotonic() + self.limit
        while len(list(self.folder.glob("ready-*"))) < self.n and time.monotonic() < give_up:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        return None


def worker(args) -> None:
    """One trial process of (b): writes its tokens and wall-clock span to --result."""
    s = settings(args)
    device = torch.device(args.device)
    sv, tv, pairs, _ = load(args, s["train_pairs"])
    around = Barrier(args.barrier, args.n) if args.barrier else None
    r = embinit_trial(s["d"], s["heads"], sv, tv, pairs, s["steps"], args.precision, device, around=around,
                      graphs=args.graphs)
    end = time.time()
    Path(args.result).write_text(json.dumps({**r, "start": end - r["seconds"], "end": end}))


class MPS:
    """The CUDA MPS control daemon in a private pipe directory (on) or a pipe directory with none (off)."""

    def __init__(self, on: bool):
        self.on, self.dir = on, Path(tempfile.mkdtemp(prefix="embinit-mps-"))
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(self.dir / "pipe"),
                    "CUDA_MPS_LOG_DIRECTORY": str(self.dir / "log")}

    def __enter__(self):
        for p in self.env.values():
            Path(p).mkdir(parents=True)
        if self.on:
            subprocess.run(["nvidia-cuda-mps-control", "-d"], env={**os.environ, **self.env}, check=True)
        return self

    def __exit__(self, *exc):
        if self.on:
            subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", env={**os.environ, **self.env},
                           check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def concurrent(args, n: int, precision: str, env: dict, graphs: bool = False) -> dict:
    """n trial processes started together (their timed steps after a `Barrier`); aggregate throughput
    over the span of those steps. `graphs`: each process's step in CUDA graphs."""
    tmp = Path(tempfile.mkdtemp(prefix="embinit-bench-"))
    (tmp / "ready").mkdir()
    base = [sys.executable, str(Path(__file__).resolve()), "--worker", "--device", args.device,
            "--precision", precision, "--steps", str(args.steps), "--barrier", str(tmp / "ready"), "--n", str(n)]
    base += ["--smoke"] if args.smoke else []
    base += ["--graphs"] if graphs else []
    base += ["--data", args.data] if args.data else []
    procs = [subprocess.Popen(base + ["--result", str(tmp / f"{i}.json")], env={**os.environ, **env,
             "OMP_NUM_THREADS": "1"}) for i in range(n)]
    codes = [p.wait() for p in procs]
    results = [json.loads((tmp / f"{i}.json").read_text()) for i in range(n) if (tmp / f"{i}.json").exists()]
    shutil.rmtree(tmp, ignore_errors=True)
    if len(results) < n:
        return {"n": n, "error": f"{n - len(results)} of {n} trial processes failed (exit codes {codes})"}
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    tokens = sum(r["tokens"] for r in results)
    epoch_share = sum(r["steps"] / r["full_epoch_steps"] for r in results)
    return {"n": n, "span_s": span, "tokens_per_s": tokens / span,
            "trial_epochs_per_gpu_hour": epoch_share * 3600 / span,
            "mean_trial_tokens_per_s": sum(r["tokens"] / r["seconds"] for r in results) / n}


# report ------------------------------------------------------------------------------------------------
def machine(device) -> dict:
    out = bt.machine(torch.get_num_threads())
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        out.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2 ** 30, 1), cuda=torch.version.cuda)
    return out


def table(result) -> str:
    lines = [f"device: {result['machine'].get('gpu') or result['machine']['cpu']}  data: {result['data']}  "
             f"D={result['d']}  bf16 matmul peak {result['peak_bf16_tflops']:.1f} TFLOP/s",
             "| run | precision | tokens/s | s/epoch | TFLOP/s | share of bf16 peak |", "|---|---|---|---|---|---|"]
    for p, entry in result["single"].items():
        for side in ("embinit", "graphed", "plain"):
            r = entry.get(side)
            if r is None or "skipped" in r:
                continue
            lines.append(f"| (a) one trial, {side} | {p} | {r['tokens_per_s']:.0f} | {r['s_per_epoch']:.2f} | "
                         f"{r['tflops']:.3g} | {r['peak_share']:.1%} |")
    graphed = {p: e["graphed"] for p, e in result["single"].items() if "graphed" in e}
    if graphed:
        lines += ["", "| (a) CUDA graphs | precision | eager tokens/s | graphed tokens/s | graphed / eager | "
                  "buckets captured | capture s per bucket (mean, max) |", "|---|---|---|---|---|---|---|"]
        for p, r in graphed.items():
            if "skipped" in r:
                lines.append(f"| graphed | {p} | skipped: {r['skipped']} | | | | |")
                continue
            cap = list(r["capture_seconds"].values())
            lines.append(f"| graphed | {p} | {result['single'][p]['embinit']['tokens_per_s']:.0f} | "
                         f"{r['tokens_per_s']:.0f} | {r['vs_eager']:.2f} | {r['buckets']} | "
                         f"{sum(cap) / max(len(cap), 1):.3f}, {max(cap, default=0):.3f} |")
    lines += ["", "| (b) trials at once | step | MPS | precision | aggregate tokens/s | trial-epochs per GPU-hour |",
              "|---|---|---|---|---|---|"]
    for r in result["concurrent"]:
        how = "graphed" if r.get("graphed") else "eager"
        if "error" in r:
            lines.append(f"| {r['n']} | {how} | {r['mps']} | {r['precision']} | {r['error']} | |")
        else:
            lines.append(f"| {r['n']} | {how} | {r['mps']} | {r['precision']} | {r['tokens_per_s']:.0f} | "
                         f"{r['trial_epochs_per_gpu_hour']:.0f} |")
    if result.get("fused"):
        lines += ["", "| (d) fused group G | precision | aggregate tokens/s | trial-epochs per GPU-hour | TFLOP/s | "
                  "share of bf16 peak | x G separate | x best separate | slots / real tokens | "
                  "slots / separate slots |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in result["fused"]:
            same = f"{r['vs_separate']['ratio']:.2f} (MPS {r['vs_separate']['mps']})" if r["vs_separate"] else "-"
            best = (f"{r['vs_best_separate']['ratio']:.2f} (N={r['vs_best_separate']['n']}, MPS "
                    f"{r['vs_best_separate']['mps']})" if r["vs_best_separate"] else "-")
            lines.append(f"| {r['g']} | {r['precision']} | {r['tokens_per_s']:.0f} | "
                         f"{r['trial_epochs_per_gpu_hour']:.0f} | {r['tflops']:.3g} | {r['peak_share']:.1%} | "
                         f"{same} | {best} | {r['slots_per_real_token']:.3f} | {r['slots_vs_separate']:.3f} |")
    return "\n".join(lines)


GRAPHS_SKIPPED = "CUDA graphs need a CUDA device; this run's device is {}"


def single(s, sv, tv, pairs, device, peak) -> dict:
    """(a): per precision the trainer's eager step, its CUDA-graphed step (`--graphs`, on CUDA) right
    after it, and the plain loop."""
    sides = [("embinit", embinit_trial)]
    if s["graphs"] and device.type == "cuda":
        sides.append(("graphed", lambda *a: embinit_trial(*a, graphs=True)))
    sides.append(("plain", plain_trial))
    out = {}
    for p in s["precisions"]:
        entry = {}
        if s["graphs"] and device.type != "cuda":
            entry["graphed"] = {"skipped": GRAPHS_SKIPPED.format(device)}
        for side, fn in sides:
            r = fn(s["d"], s["heads"], sv, tv, pairs, s["steps"], p, device)
            full = r.get("full_epoch_steps") or entry["embinit"]["full_epoch_steps"]
            entry[side] = {**r, "tokens_per_s": r["tokens"] / r["seconds"],
                           "s_per_epoch": r["seconds"] / r["steps"] * full,
                           "tflops": r["flops"] / r["seconds"] / 1e12,
                           "peak_share": r["flops"] / r["seconds"] / peak}
            if side == "graphed":
                entry[side]["vs_eager"] = entry[side]["tokens_per_s"] / entry["embinit"]["tokens_per_s"]
            print(f"(a) {side} {p}: {entry[side]['tokens_per_s']:.0f} tokens/s", file=sys.stderr, flush=True)
        entry["plain"]["full_epoch_steps"] = entry["embinit"]["full_epoch_steps"]
        out[p] = entry
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("EMBINIT_BENCH_MULTI30K"),
                    help="Multi30k folder (train.de, train.en, val.de, val.en); default $EMBINIT_BENCH_MULTI30K")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(HERE / "results"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=0, help="batches per trial (0: a whole epoch)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--fused", type=int, nargs="*", default=[4, 8, 16, 32],
                    help="fused group sizes for (d); each is also run as that many processes under MPS")
    ap.add_argument("--graphs", action="store_true",
                    help="(a) also runs the trial with its step in CUDA graphs (cuda_graphs), after the eager one; "
                         "(b) also runs its N graphed processes under MPS")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, CPU-friendly (tests)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--barrier", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return {}
    s = settings(args)
    device = torch.device(args.device)
    sv, tv, pairs, source = load(args, s["train_pairs"])
    peak = matmul_peak(device, sizes=(512,) if args.smoke else (4096, 8192))
    result = {"machine": machine(device), "data": source, "d": s["d"], "heads": s["heads"],
              "layers": bt.LAYERS, "ff_dim": bt.FF, "batch_size": bt.BATCH, "vocab": [len(sv), len(tv)],
              "smoke": args.smoke, "graphs": args.graphs, "peak_bf16_tflops": peak / 1e12}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    def save():   # after every section: a device call cut off at its limit keeps what already ran
        (out / "bench_gpu.json").write_text(json.dumps(result, indent=2))
    result["single"] = single(s, sv, tv, pairs, device, peak)
    save()
    best = max(s["precisions"], key=lambda p: result["single"][p]["embinit"]["tokens_per_s"])
    fused = fused_rows(s, sv, tv, pairs, device, peak, best)      # (d) before (b): the cheaper section first
    result["fused"], result["concurrent"] = compare_fused(fused, []), []
    save()
    mps_modes = ["on", "off"] if device.type == "cuda" and shutil.which("nvidia-cuda-mps-control") else ["n/a"]
    for mode in mps_modes:
        sizes = s["concurrency"] if mode == "off" else sorted(set(s["concurrency"]) | set(s["fused"]))
        with MPS(mode == "on") if mode != "n/a" else _Nothing() as mps:
            for n in sizes:
                r = concurrent(args, n, best, getattr(mps, "env", {}))
                result["concurrent"].append({**r, "mps": mode, "precision": best})
                result["fused"] = compare_fused(fused, result["concurrent"])
                save()
                print(f"(b) {n} trials, MPS {mode}: {r.get('tokens_per_s', r.get('error'))}", file=sys.stderr,
                      flush=True)
    if s["graphs"] and "on" in mps_modes:   # many graphed trials per GPU: MPS on (CUDA only)
        with MPS(True) as mps:
            for n in s["concurrency"]:
                r = concurrent(args, n, best, mps.env, graphs=True)
                result["concurrent"].append({**r, "mps": "on", "precision": best, "graphed": True})
                save()
                print(f"(b) {n} graphed trials, MPS on: {r.get('tokens_per_s', r.get('error'))}", file=sys.stderr,
                      flush=True)
    print(table(result))
    print(f"wrote {out / 'bench_gpu.json'}")
    return result


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    main()
