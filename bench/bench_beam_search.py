"""Benchmark: the vectorised beam search against the row-by-row one it replaced, and greedy decoding
(`--beams 1`) that drops ended rows against the one that kept them.

The reference is tests/helpers/beam_reference.py (`embinit/train/decoding.py`'s beam search as of commit
5dafea0: a Python loop over the batch's rows at every step); for beam 1 it is tests/helpers/greedy_reference.py
(greedy as of commit 4e37ba7, which decoded every row until all had ended). Both decode the same batch of random
Multi30k-length sources (8 to 20 words) with the same small untrained encoder-decoder, at each beam,
interleaved (old, new, old, new, ...) in this process; the best time of each is compared, and the ratio is
the figure (the machine is shared: absolute seconds are not comparable across runs). The output layer's
weights times `--sharpness` make the next-token distributions peaked and its eos bias (`--eos-bias`) makes
rows end at different lengths, as a trained model's do; the run records how long the hypotheses are, how
many rows ran to their cap, and whether both searches returned the same hypotheses (they must).
Runs are appended to bench/results/beam_search.json.

    python bench/bench_beam_search.py [--sentences 64] [--beams 1 4 5] [--d 256] [--vocab 6000] [--reps 3]
                                      [--threads 2] [--device cpu] [--sharpness 4] [--eos-bias 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from bench.machine import append_result, cpu_model  # noqa: E402


def model_and_batch(args):
    import torch

    from embinit.models import ModelConfig, build_model
    from embinit.train.batching import pad
    from embinit.train.decoding import EOS_ID
    g = torch.Generator().manual_seed(0)
    tables = {"src": torch.randn(args.vocab, args.d, generator=g), "tgt": torch.randn(args.vocab, args.d, generator=g)}
    cfg = ModelConfig(d_model=args.d, heads=4, layers=3, ff_dim=2 * args.d, max_positions=128)
    model = build_model("translation", tables, cfg, num_labels=2, generator=g).eval().to(args.device)
    with torch.no_grad():
        model.output.weight *= args.sharpness
        model.output.bias[EOS_ID] += args.eos_bias
    lengths = torch.randint(8, 21, (args.sentences,), generator=g).tolist()
    src = pad([torch.randint(4, args.vocab, (n,), generator=g).tolist() + [EOS_ID] for n in lengths])
    return model, src.to(args.device)


def timed(search, model, src, beam):
    import torch
    if src.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        hyps = search(model, src, beam)
    if src.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, hyps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beams", type=int, nargs="+", default=[1, 4, 5])
    for name, default in (("sentences", 64), ("d", 256), ("vocab", 6000), ("sharpness", 4.0), ("eos-bias", 4.0),
                          ("reps", 3), ("threads", 2)):
        ap.add_argument(f"--{name}", type=type(default), default=default)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "beam_search.json"))
    args = ap.parse_args(argv)
    import torch

    from embinit.train.decoding import beam_search, greedy, row_caps
    from helpers.beam_reference import beam_search as reference
    from helpers.greedy_reference import greedy as greedy_reference
    torch.set_num_threads(args.threads)
    model, src = model_and_batch(args)
    caps = row_caps(src, model.cfg.max_positions).tolist()
    result = {"benchmark": "beam_search", "cpu": cpu_model(), "device": args.device, "threads": args.threads,
              "sentences": args.sentences, "d_model": args.d, "vocab": args.vocab, "layers": 3,
              "eos_bias": args.eos_bias, "load_avg_1m": os.getloadavg()[0], "beams": {}}
    for beam in args.beams:
        times, outputs = {"old": [], "new": []}, {}
        for _ in range(args.reps):
            pair = (("old", greedy_reference), ("new", lambda m, s, _: greedy(m, s))) if beam == 1 else \
                (("old", reference), ("new", beam_search))
            for name, search in pair:
                seconds, outputs[name] = timed(search, model, src, beam)
                times[name].append(seconds)
        lengths = [len(h) for h in outputs["new"]]
        result["beams"][beam] = {
            "times_s": times, "ratio_old_over_new": min(times["old"]) / min(times["new"]),
            "same_hypotheses": outputs["old"] == outputs["new"],
            "mean_hypothesis_length": sum(lengths) / len(lengths),
            "rows_at_cap": sum(n == c for n, c in zip(lengths, caps))}
        print(f"beam {beam}: old/new time {result['beams'][beam]['ratio_old_over_new']:.2f}, "
              f"same hypotheses: {result['beams'][beam]['same_hypotheses']}", flush=True)
    append_result(Path(args.out), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
