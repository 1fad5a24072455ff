"""Benchmark: beam search that drops a row once it has stopped against the vectorised one that kept every
row (or the row-by-row one before it), and greedy decoding (`--beams 1`) that drops ended rows against the
one that kept them.

The reference (`--baseline`) is tests/helpers/beam_keep_rows_reference.py (`keep_rows`: the beam search of
commit 9d63a7c, vectorised across rows, every row in the batch until all had stopped) or
tests/helpers/beam_reference.py (`row_by_row`: as of commit 5dafea0, a Python loop over the batch's rows at
every step); for beam 1 it is tests/helpers/greedy_reference.py (greedy as of commit 4e37ba7, which decoded
every row until all had ended). Both decode the same batch of random
Multi30k-length sources (8 to 20 words) with the same small untrained encoder-decoder, at each beam,
interleaved (old, new, old, new, ...) in this process; the best time of each is compared, and the ratio is
the figure (the machine is shared: absolute seconds are not comparable across runs). The output layer's
weights times `--sharpness` make the next-token distributions peaked and its eos bias (`--eos-bias`) makes
rows end at different lengths, as a trained model's do; the run records how long the hypotheses are, how
many rows ran to their cap, and whether both searches returned the same hypotheses (they must: the run
exits 1 when they do not).
With `--pairs DIR` (a Multi30k-layout folder: val.de, val.en) the batch is instead every validation
sentence, in `translate`'s batches of `--batch` sorted by source length, each source as long as its
German sentence, and each row made to end (eos) after as many tokens as its English reference has words
(`EndsAt`): the lengths a trained model's outputs have, which decide how much dropping ended rows saves.
Runs are appended to bench/results/beam_search.json.

    python bench/bench_beam_search.py [--sentences 64] [--beams 1 4 5] [--d 256] [--vocab 6000] [--reps 3]
                                      [--threads 2] [--device cpu] [--sharpness 4] [--eos-bias 4]
                                      [--pairs DATA/multi30k --batch 128] [--baseline keep_rows|row_by_row]
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
    if args.pairs:
        return model, pair_batches(args, g)
    lengths = torch.randint(8, 21, (args.sentences,), generator=g).tolist()
    src = pad([torch.randint(4, args.vocab, (n,), generator=g).tolist() + [EOS_ID] for n in lengths])
    return model, [(src.to(args.device), None)]


def pair_batches(args, g):
    """(source batch, each row's output length) for the validation pairs of `args.pairs`, in `translate`'s
    batches (sorted by source length)."""
    import torch

    from embinit.train.batching import pad
    from embinit.train.decoding import EOS_ID
    words = [[len(line.split()) for line in (Path(args.pairs) / f"val.{lang}").read_text().splitlines()]
             for lang in ("de", "en")]
    order = sorted(range(len(words[0])), key=lambda i: words[0][i])
    out = []
    for start in range(0, len(order), args.batch):
        idx = order[start:start + args.batch]
        src = pad([torch.randint(4, args.vocab, (words[0][i],), generator=g).tolist() + [EOS_ID] for i in idx])
        out.append((src.to(args.device), torch.tensor([words[1][i] for i in idx], device=args.device)))
    return out


class EndsAt:
    """`model`, each of whose rows emits eos after `lengths[row]` tokens and never before (the decoding
    interface: encode, start_state, decode_step, reorder_state; the network's work is unchanged)."""

    def __init__(self, model, lengths):
        self.model, self.cfg, self.lengths = model, model.cfg, lengths

    def encode(self, src):
        return self.model.encode(src)

    def start_state(self, memory, mask):
        return {**self.model.start_state(memory, mask), "ends": self.lengths}

    def reorder_state(self, state, index, memory=True):
        self.model.reorder_state(state, index, memory=memory)
        state["ends"] = state["ends"][index]

    def decode_step(self, tokens, state):
        import torch

        from embinit.train.decoding import EOS_ID
        logits = self.model.decode_step(tokens, state)
        end = state["ends"] == state["pos"] - 1           # this step's token is the row's eos
        top = logits.abs().amax(-1) + 1
        logits[:, EOS_ID] = torch.where(end, top, torch.full_like(top, float("-inf")))
        return logits


def timed(search, model, batches, beam):
    import torch
    if batches[0][0].device.type == "cuda":
        torch.cuda.synchronize()
    t0, hyps = time.perf_counter(), []
    with torch.no_grad():
        for src, ends in batches:
            hyps += search(model if ends is None else EndsAt(model, ends), src, beam)
    if batches[0][0].device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, hyps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beams", type=int, nargs="+", default=[1, 4, 5])
    for name, default in (("sentences", 64), ("d", 256), ("vocab", 6000), ("sharpness", 4.0), ("eos-bias", 4.0),
                          ("reps", 3), ("threads", 2)):
        ap.add_argument(f"--{name}", type=type(default), default=default)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pairs", help="a Multi30k-layout folder (val.de, val.en): decode its validation set")
    ap.add_argument("--batch", type=int, default=128, help="sentences per batch with --pairs")
    ap.add_argument("--baseline", choices=["keep_rows", "row_by_row"], default="keep_rows",
                    help="the beam search (beam > 1) the current one is timed against")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "beam_search.json"))
    args = ap.parse_args(argv)
    import torch

    from embinit.train.decoding import beam_search, greedy, row_caps
    from helpers.beam_keep_rows_reference import beam_search as keep_rows
    from helpers.beam_reference import beam_search as row_by_row
    from helpers.greedy_reference import greedy as greedy_reference
    torch.set_num_threads(args.threads)
    model, batches = model_and_batch(args)
    caps = [c for src, _ in batches for c in row_caps(src, model.cfg.max_positions).tolist()]
    result = {"benchmark": "beam_search", "cpu": cpu_model(), "device": args.device, "threads": args.threads,
              "sentences": len(caps), "pairs": args.pairs, "batch": args.batch if args.pairs else None,
              "d_model": args.d, "vocab": args.vocab, "layers": 3,
              "baseline": args.baseline, "eos_bias": args.eos_bias, "load_avg_1m": os.getloadavg()[0], "beams": {}}
    for beam in args.beams:
        times, outputs = {"old": [], "new": []}, {}
        for _ in range(args.reps):
            pair = (("old", greedy_reference), ("new", lambda m, s, _: greedy(m, s))) if beam == 1 else \
                (("old", {"keep_rows": keep_rows, "row_by_row": row_by_row}[args.baseline]), ("new", beam_search))
            for name, search in pair:
                seconds, outputs[name] = timed(search, model, batches, beam)
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
    differ = [beam for beam, r in result["beams"].items() if not r["same_hypotheses"]]
    if differ:   # a faster search that decodes other tokens is no result: the run is recorded, and fails
        print(f"error: the searches returned different hypotheses at beam {differ}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
