"""Trainer benchmark: embinit's translation trainer against a plain `torch.nn.Transformer` loop.

Multi30k-shaped batches (the real Multi30k train/val files when available), D=300 and D=512, 3+3 layers,
feed-forward 512, 64 sentence pairs per batch, Adam, 2 threads. All ratios come from one run on one
machine; each measurement alternates the two implementations and keeps the best of `--repeats` rounds,
so a burst of load from other processes hurts neither side more than the other.

Reported per D:
- training tokens/s (non-pad source + target tokens) of embinit vs the plain padded loop, fp32 and bf16;
- achieved GFLOP/s (matmul FLOPs executed: forward x3 for forward + backward) and its share of the
  measured matmul peak for the same precision;
- share of non-pad tokens in the training batches of both;
- greedy decoding of Multi30k val: cached (incremental) vs re-running the decoder on the whole prefix;
  each batch decodes as many steps as its longest reference + 1, what a trained model needs (an
  untrained model would never emit <eos>), and both modes must produce the same tokens.

    python bench/bench_trainer.py [--data DIR] [--steps 30] [--threads 2]
Data: --data or $EMBINIT_BENCH_MULTI30K (a folder with train.de/train.en/val.de/val.en); without it,
synthetic sentences with Multi30k's length distribution (mean ~12 tokens) are used and the JSON says so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from embinit.models import ModelConfig, build_model, set_dropout_generator
from embinit.posenc import sinusoidal
from embinit.train.decoding import greedy
from embinit.train.loop import autocast_for
from embinit.train.translation import TranslationTask
from embinit.train.lifecycle import make_optimizer
from embinit.vocab import Vocab
from machine import cpu_model  # bench/machine.py

BATCH, LAYERS, FF = 64, 3, 512
HEADS = {300: 10, 512: 8}
TOKEN = re.compile(r"\w+|[^\w\s]")


# data ------------------------------------------------------------------------------------------------
def load_pairs(folder: Path | None):
    if folder is None:
        return synthetic_pairs(), "synthetic (Multi30k-like lengths)"
    def read(name):
        return [TOKEN.findall(line.lower()) for line in (folder / name).read_text(encoding="utf-8").splitlines()]
    train = list(zip(read("train.de"), read("train.en")))
    val = list(zip(read("val.de"), read("val.en")))
    return (train, val), f"Multi30k from {folder}"


def synthetic_pairs():
    rng = random.Random(0)
    words = [f"w{i}" for i in range(8000)]
    def sent(n):
        return [rng.choice(words) for _ in range(n)]
    def pair():
        n = max(3, int(rng.gauss(12.5, 4)))
        return sent(n), sent(max(3, n + rng.randint(-2, 2)))
    return [pair() for _ in range(29000)], [pair() for _ in range(1014)]


def numericalize(train, val):
    sv = Vocab.build(Counter(t for s, _ in train for t in s), 2)
    tv = Vocab.build(Counter(t for _, s in train for t in s), 2)
    enc = lambda pairs: [(sv.encode(s), tv.encode(t)) for s, t in pairs]  # noqa: E731
    return sv, tv, enc(train), enc(val)


# the plain loop ----------------------------------------------------------------------------------------
class PlainTransformer(nn.Module):
    """The textbook PyTorch translation model: nn.Transformer + embeddings x sqrt(D) + sinusoidal PE."""

    def __init__(self, sv, tv, d, heads):
        super().__init__()
        self.src_emb, self.tgt_emb = nn.Embedding(sv, d), nn.Embedding(tv, d)
        self.register_buffer("pe", sinusoidal(512, d))
        self.tf = nn.Transformer(d, heads, LAYERS, LAYERS, FF, 0.1, batch_first=True)
        self.out = nn.Linear(d, tv)
        self.drop, self.scale = nn.Dropout(0.1), math.sqrt(d)

    def forward(self, src, tgt_in):
        s = self.drop(self.src_emb(src) * self.scale + self.pe[:src.shape[1]])
        t = self.drop(self.tgt_emb(tgt_in) * self.scale + self.pe[:tgt_in.shape[1]])
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=tgt_in.device)
        h = self.tf(s, t, tgt_mask=causal, src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt_in == 0,
                    memory_key_padding_mask=src == 0, tgt_is_causal=True)
        return self.out(h)


def plain_batches(pairs, n, seed=0):
    """Fixed-size batches of randomly ordered pairs, padded to the batch's longest sequence."""
    rng = random.Random(seed)
    idx = list(range(len(pairs)))
    rng.shuffle(idx)
    out = []
    for b in range(n):
        chunk = [pairs[i] for i in idx[b * BATCH:(b + 1) * BATCH]]
        out.append(TranslationTask._collate(chunk))
    return out


def plain_step(model, opt, batch, autocast):
    with autocast():
        logits = model(batch["src"], batch["tgt_in"])
        loss = F.cross_entropy(logits.float().flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=0)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


# FLOP accounting ---------------------------------------------------------------------------------------
def flops(batch, d, vocab, output_rows, causal_half):
    """Forward matmul FLOPs of one batch (x3 for training). output_rows: rows the output layer runs on.
    causal_half: whether decoder self-attention skips the masked half (fused causal kernel)."""
    b, s = batch["src"].shape
    t = batch["tgt_in"].shape[1]
    es, et = b * s, b * t
    enc = es * (2 * 4 * d * d + 2 * 2 * d * FF) + 2 * 2 * b * s * s * d
    self_att = 2 * 2 * b * t * t * d * (0.5 if causal_half else 1.0)
    dec = et * (2 * 4 * d * d + 2 * 2 * d * FF) + self_att + et * 2 * 2 * d * d + es * 2 * 2 * d * d \
        + 2 * 2 * b * t * s * d
    return 3 * (LAYERS * (enc + dec) + 2 * output_rows * d * vocab)


def non_pad(batch):
    return int((batch["src"] != 0).sum() + (batch["tgt_in"] != 0).sum())


def padded(batch):
    return batch["src"].numel() + batch["tgt_in"].numel()


# measurements ------------------------------------------------------------------------------------------
def time_steps(step, batches, warmup=3):
    for b in batches[:warmup]:
        step(b)
    start = time.perf_counter()
    for b in batches[warmup:]:
        step(b)
    return time.perf_counter() - start


def matmul_peak(dtype, threads):
    best = 0.0
    for n in (1024, 2048):
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        for _ in range(2):
            torch.mm(a, b)
        reps = 10
        start = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - start) / 1e9)
    return best


def translation_task(pairs, tv, device, autocast) -> TranslationTask:
    """The trainer's translation task over `pairs` (its batching, loss and step), with the config fields it
    reads: Multi30k's task (an English target: BLEU's 13a), `BATCH` rows a batch, no validation BLEU."""
    cfg = SimpleNamespace(task="multi30k", batch_size=BATCH, max_tokens=None, beam_size=1,
                          extras={"val_bleu": False})
    data = SimpleNamespace(splits={"train": pairs}, eval_splits=["train"], vocab=tv, info={})
    return TranslationTask(data, cfg, device, autocast)


def bench_training(d, pairs, sv, tv, steps, repeats, precision):
    heads = HEADS.get(d, 8)
    ac = autocast_for(precision, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    ours = build_model("translation", {"src": torch.randn(len(sv), d, generator=g) * 0.05,
                                       "tgt": torch.randn(len(tv), d, generator=g) * 0.05},
                       ModelConfig(d_model=d, heads=heads, layers=LAYERS, ff_dim=FF), generator=g)
    set_dropout_generator(ours, torch.Generator().manual_seed(1))
    task = translation_task(pairs, tv, torch.device("cpu"), ac)
    ours_batches = task.train_batches(torch.Generator().manual_seed(0))[:steps + 3]
    ours_opt = make_optimizer(list(ours.parameters()), 2e-4)  # the trainer's own optimizer

    def ours_step(batch):
        with ac():
            loss, _, _ = task.batch_loss(ours, batch)
        ours_opt.zero_grad(set_to_none=True)
        loss.backward()
        ours_opt.step()

    torch.manual_seed(0)
    plain = PlainTransformer(len(sv), len(tv), d, heads)
    for p in plain.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    plain_opt = torch.optim.Adam(plain.parameters(), lr=2e-4, betas=(0.9, 0.98), eps=1e-9)
    plain_b = plain_batches(pairs, steps + 3)
    ours.train(), plain.train()
    best = {"ours": math.inf, "plain": math.inf}
    for _ in range(repeats):  # alternate, keep each side's best round
        best["plain"] = min(best["plain"], time_steps(lambda b: plain_step(plain, plain_opt, b, ac), plain_b))
        best["ours"] = min(best["ours"], time_steps(ours_step, ours_batches))
    out = {}
    for name, batches in (("ours", ours_batches[3:]), ("plain", plain_b[3:])):
        tok = sum(non_pad(b) for b in batches)
        rows = sum(int((b["tgt_out"] != 0).sum()) if name == "ours" else b["tgt_out"].numel() for b in batches)
        fl = sum(flops(b, d, len(tv), 0, name == "ours") for b in batches) + 3 * 2 * rows * d * len(tv)
        out[name] = {"seconds": best[name], "steps": len(batches), "tokens_per_s": tok / best[name],
                     "gflops_per_s": fl / best[name] / 1e9,
                     "non_pad_share": tok / sum(padded(b) for b in batches)}
    out["speedup"] = out["ours"]["tokens_per_s"] / out["plain"]["tokens_per_s"]
    return out, ours


def bench_decoding(model, val, batch_size=128, repeats=2):
    """Greedy decoding of the validation sources, cached vs uncached, same steps per batch."""
    model.eval()
    order = sorted(range(len(val)), key=lambda i: len(val[i][0]))
    batches = []
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        src = TranslationTask._collate([val[i] for i in idx])["src"]
        batches.append((src, max(len(val[i][1]) for i in idx) + 1))
    times, outputs = {}, {}
    with torch.no_grad():
        for _ in range(repeats):
            for mode in ("uncached", "cached"):
                start = time.perf_counter()
                outputs[mode] = [greedy(model, s, cached=mode == "cached", steps=n, stop_at_eos=False)
                                 for s, n in batches]
                times[mode] = min(times.get(mode, math.inf), time.perf_counter() - start)
    return {"sentences": len(val), "cached_s": times["cached"], "uncached_s": times["uncached"],
            "speedup": times["uncached"] / times["cached"], "same_output": outputs["cached"] == outputs["uncached"]}


def machine(threads):
    return {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "threads": threads, "torch": torch.__version__,
            "capability": torch.backends.cpu.get_cpu_capability(), "python": platform.python_version()}


def main(argv=None):
    # the textbook loop mixes a float causal mask with bool padding masks, as PyTorch's tutorial does
    warnings.filterwarnings("ignore", message="Support for mismatched key_padding_mask")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("EMBINIT_BENCH_MULTI30K"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dims", type=int, nargs="+", default=[300, 512])
    ap.add_argument("--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "trainer.json"))
    args = ap.parse_args(argv)
    folder = Path(args.data) if args.data else None
    if folder is not None and not (folder / "train.de").is_file():
        sys.exit(f"--data {folder}: no train.de there (need Multi30k train/val .de/.en files)")
    if folder is None:
        print("no Multi30k folder given (--data or EMBINIT_BENCH_MULTI30K): using synthetic lengths",
              file=sys.stderr)
    torch.set_num_threads(args.threads)
    (train, val), source = load_pairs(folder)
    sv, tv, train_ids, val_ids = numericalize(train, val)
    result = {"machine": machine(args.threads), "data": source, "vocab": [len(sv), len(tv)],
              "batch_size": BATCH, "layers": LAYERS, "ff_dim": FF, "load_before": os.getloadavg(),
              "peak_gflops": {"fp32": matmul_peak(torch.float32, args.threads),
                              "bf16": matmul_peak(torch.bfloat16, args.threads)}, "dims": {}}
    print(f"matmul peak: {result['peak_gflops']}", flush=True)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    for d in args.dims:
        entry = {}
        for precision in args.precisions:
            # the peak is re-measured next to each run and the highest value kept: under contention
            # from other processes a low peak would flatter the achieved share
            peaks = result["peak_gflops"]
            peaks[precision] = max(peaks[precision], matmul_peak(dtypes[precision], args.threads))
            r, model = bench_training(d, train_ids, sv, tv, args.steps, args.repeats, precision)
            entry[precision] = r
            print(f"D={d} {precision}: embinit {r['ours']['tokens_per_s']:.0f} tok/s "
                  f"({r['ours']['gflops_per_s']:.0f} GFLOP/s, peak so far {peaks[precision]:.0f}, "
                  f"non-pad {r['ours']['non_pad_share']:.1%}) vs plain {r['plain']['tokens_per_s']:.0f} tok/s "
                  f"({r['plain']['gflops_per_s']:.0f} GFLOP/s, non-pad {r['plain']['non_pad_share']:.1%}): "
                  f"{r['speedup']:.2f}x", flush=True)
        entry["decode"] = bench_decoding(model, val_ids)
        print(f"D={d} greedy decode of {len(val_ids)} val sentences: cached {entry['decode']['cached_s']:.1f} s, "
              f"uncached {entry['decode']['uncached_s']:.1f} s: {entry['decode']['speedup']:.2f}x, "
              f"same output: {entry['decode']['same_output']}", flush=True)
        result["dims"][str(d)] = entry
        write(args.out, result)  # after each D, so a long run interrupted later keeps what it measured
    result["load_after"] = os.getloadavg()
    for d, entry in result["dims"].items():
        for precision in args.precisions:
            for side in ("ours", "plain"):
                r = entry[precision][side]
                r["peak_share"] = r["gflops_per_s"] / result["peak_gflops"][precision]
        print(f"D={d} peak shares: " + ", ".join(f"{p} embinit {entry[p]['ours']['peak_share']:.0%} / plain "
                                          f"{entry[p]['plain']['peak_share']:.0%}" for p in args.precisions))
    write(args.out, result)
    print(f"wrote {args.out}")


def write(path, result):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
