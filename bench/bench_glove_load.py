"""Benchmark: build `glove+standardize` for a 10k-word vocabulary from GloVe 6B 50d (400k words, text),
cold (empty cache) and cached, beside gensim's full `KeyedVectors.load_word2vec_format`, in one run.

Goals (issue 2): cold >= 3x faster than gensim's full load; cached < 0.5 s.

Usage: python bench/bench_glove_load.py --glove PATH [--multi30k-en PATH] [--wikitext PATH]
       (or set EMBINIT_BENCH_GLOVE / EMBINIT_BENCH_DATA). The vocabulary: the most frequent lowercased
       words of Multi30k's English training side, topped up to 10,000 entries (4 specials included)
       with the most frequent WikiText-2 validation words. The file is read once before timing so every
       measurement sees the same (warm) OS page cache. Writes bench/results/glove_load.json and prints
       a markdown row.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from embinit.init import build_table, load_aligned
from embinit.vocab import SPECIALS, Vocab
from machine import cpu_model  # bench/machine.py

DATA = Path(os.environ.get("EMBINIT_BENCH_DATA", "/work/shared/data"))
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?|[0-9]+|[^\sa-z0-9]")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--glove", default=os.environ.get("EMBINIT_BENCH_GLOVE", "/work/assets/glove.6B.50d.txt"))
    p.add_argument("--multi30k-en", default=str(DATA / "multi30k" / "train.en"))
    p.add_argument("--wikitext", default=str(DATA / "wikitext2" / "wiki.valid.tokens"))
    p.add_argument("--size", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "glove_load.json"))
    p.add_argument("--skip-gensim", action="store_true")
    return p.parse_args()


def need(path: str, what: str) -> Path:
    if not Path(path).is_file():
        sys.exit(f"bench_glove_load: {what} not found at {path}; pass its path (see --help)")
    return Path(path)


def counts(path: Path) -> Counter:
    c = Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            c.update(WORD.findall(line.lower()))
    return c


def make_vocab(args) -> Vocab:
    primary = counts(need(args.multi30k_en, "Multi30k train.en"))
    extra = counts(need(args.wikitext, "WikiText-2 valid"))
    words = [w for w, _ in primary.most_common()][: args.size - len(SPECIALS)]
    seen = set(words)
    for w, _ in extra.most_common():
        if len(words) >= args.size - len(SPECIALS):
            break
        if w not in seen and "@" not in w:
            words.append(w)
            seen.add(w)
    return Vocab(list(SPECIALS) + words, {w: primary.get(w, 0) + extra.get(w, 0) for w in words}, SPECIALS)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def machine() -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "loadavg_1m": os.getloadavg()[0],
            "python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform()}


def main() -> int:
    args = parse_args()
    glove = need(args.glove, "GloVe 6B 50d text file")
    torch.set_num_threads(1)
    vocab = make_vocab(args)
    with open(glove, "rb") as f:   # warm the OS page cache so all timings parse from memory
        while f.read(1 << 24):
            pass
    cold, cached = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            t, res = timed(lambda r=r: build_table("glove+standardize", vocab, pretrained=str(glove),
                                                   cache_dir=Path(tmp) / f"c{r}", seed=0))
            cold.append(t)
        for _ in range(5):
            t, again = timed(lambda: build_table("glove+standardize", vocab, pretrained=str(glove),
                                                 cache_dir=Path(tmp) / "c0", seed=0))
            assert again.info["cached"] and torch.equal(again.table, res.table)
            cached.append(t)
        aligned, _ = load_aligned("text", str(glove), vocab, False, Path(tmp) / "c0")
    result = {"vocab_size": len(vocab), "rows_found": res.coverage["rows_found"],
              "token_share": round(res.coverage["token_share"], 4), "glove_file": str(glove),
              "glove_bytes": glove.stat().st_size, "cold_s": [round(t, 3) for t in cold],
              "cold_median_s": round(statistics.median(cold), 3), "cached_s": [round(t, 4) for t in cached],
              "cached_median_s": round(statistics.median(cached), 4), "machine": machine()}
    if not args.skip_gensim:
        from gensim.models import KeyedVectors
        t, kv = timed(lambda: KeyedVectors.load_word2vec_format(str(glove), binary=False, no_header=True))
        result["gensim_full_load_s"] = round(t, 3)
        result["gensim_words"] = len(kv)
        result["cold_speedup_vs_gensim"] = round(t / result["cold_median_s"], 2)
        # cross-check: every row embinit found is gensim's row for the same word, bit for bit
        words = [vocab.tokens[i] for i in aligned.found.tolist()]
        result["rows_identical_to_gensim"] = bool(all(
            torch.equal(aligned.rows[k], torch.from_numpy(kv[w].copy())) for k, w in enumerate(words)))
    result["goals"] = {"cold_3x_faster_than_gensim": result.get("cold_speedup_vs_gensim", 0) >= 3,
                       "cached_under_0.5s": result["cached_median_s"] < 0.5}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print("| vocab | rows found | embinit cold (s) | embinit cached (s) | gensim full load (s) | speedup |")
    print("|---|---|---|---|---|---|")
    print(f"| {len(vocab):,} | {result['rows_found']:,} | {result['cold_median_s']} | {result['cached_median_s']} "
          f"| {result.get('gensim_full_load_s', '-')} | {result.get('cold_speedup_vs_gensim', '-')}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
