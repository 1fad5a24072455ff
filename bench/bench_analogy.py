"""Benchmark: embinit's 3CosAdd analogies against gensim's `evaluate_word_analogies` on real vectors.

Wall and process CPU time are both reported (the machine may be shared).
Same vectors (GloVe 6B 50d), same questions (word2vec's questions-words.txt), same vocabulary limits
(the 30,000 most frequent words, and all 400,000): the accuracies must agree to 0.1 points; the time
ratio is measured in this one run. Loading is timed separately from evaluation.

    python bench/bench_analogy.py --glove /path/glove.6B.50d.txt --questions /path/questions-words.txt

Paths default to $EMBINIT_GLOVE and $EMBINIT_ANALOGY_QUESTIONS. Writes bench/results/analogy.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from embinit.analysis.analogy import evaluate_analogies, load_questions, select_rows
from embinit.analysis.sources import load_embeddings
from machine import cpu_model  # bench/machine.py


def machine() -> dict:
    import psutil
    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "load_avg_1m": os.getloadavg()[0],
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1), "torch": torch.__version__,
            "python": platform.python_version()}


def need(path: str | None, what: str, env: str) -> Path:
    if not path:
        sys.exit(f"bench_analogy: give {what} with --{what} or ${env}")
    p = Path(path)
    if not p.is_file():
        sys.exit(f"bench_analogy: {what} file not found: {p}")
    return p


def run_gensim(glove: Path, questions: Path, limits: list[int]) -> dict:
    from gensim.models import KeyedVectors
    t = time.perf_counter()
    kv = KeyedVectors.load_word2vec_format(str(glove), binary=False, no_header=True)
    out = {"load_s": time.perf_counter() - t, "vocab": len(kv)}
    for limit in limits:
        t, c = time.perf_counter(), time.process_time()
        score, sections = kv.evaluate_word_analogies(str(questions), restrict_vocab=limit,
                                                     case_insensitive=True)
        total = next(s for s in sections if s["section"] == "Total accuracy")
        out[str(limit)] = {"time_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                           "accuracy": 100.0 * score,
                           "correct": len(total["correct"]),
                           "total": len(total["correct"]) + len(total["incorrect"])}
    return out


def run_embinit(glove: Path, questions: Path, limits: list[int]) -> dict:
    t = time.perf_counter()
    emb = load_embeddings(glove)
    qs = load_questions(questions)
    out = {"load_s": time.perf_counter() - t, "vocab": len(emb.tokens)}
    for limit in limits:
        t, c = time.perf_counter(), time.process_time()
        res = evaluate_analogies(emb.matrix, emb.tokens, qs, restrict=limit)
        d = res.to_dict()
        out[str(limit)] = {"time_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                           "accuracy": res.accuracy,
                           "correct": res.correct, "total": res.total,
                           "semantic": d["semantic"]["accuracy"], "syntactic": d["syntactic"]["accuracy"]}
    return out


def run_table4_multi30k(glove: Path, questions: Path, data_dir: Path, top: int = 5893) -> dict:
    """The paper's Table-4 setting: the table of Multi30k's `top` most frequent English words (the
    paper: 5,893, 1,631 applicable questions), every chain row, at the paper's 5,000-row position table
    and at fewer distinct positions (how many positions the paper's PE rows must have come from)."""
    from embinit.analysis.table4 import EXTRA_ROWS, TABLE4_ROWS, run_table4
    from embinit.tasks import load_task

    vocab = load_task("multi30k", data_dir=data_dir).vocab
    wanted = [t for t in vocab.tokens if t not in vocab.specials][:top]
    emb = load_embeddings(glove)
    matrix, tokens, n_total = select_rows(emb.matrix, emb.tokens, wanted)
    qs = load_questions(questions)
    out = {"vocab_words": len(wanted), "rows_found": len(tokens), "by_max_len": {}}
    for max_len in (5000, 64, 16, 4):
        rows = TABLE4_ROWS + EXTRA_ROWS if max_len == 5000 else [r for r in TABLE4_ROWS + EXTRA_ROWS
                                                                  if any("pe" in s for s in r[0])]
        res = run_table4(matrix, tokens, qs, rows=rows, max_len=max_len, n_total=n_total)
        out["by_max_len"][str(max_len)] = [{"row": label, "paper": paper, "result": r.summary_line()}
                                           for label, paper, r in res]
        print(max_len, json.dumps(out["by_max_len"][str(max_len)]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glove", default=os.environ.get("EMBINIT_GLOVE"))
    ap.add_argument("--questions", default=os.environ.get("EMBINIT_ANALOGY_QUESTIONS"))
    ap.add_argument("--limits", default="30000,400000")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--multi30k", default=os.environ.get("EMBINIT_MULTI30K"),
                    help="Multi30k data folder: also run the Table-4 chain on its 5,893-word table")
    ap.add_argument("--skip-gensim", action="store_true")
    ap.add_argument("--out", default="bench/results/analogy.json")
    args = ap.parse_args()
    glove, questions = need(args.glove, "glove", "EMBINIT_GLOVE"), need(
        args.questions, "questions", "EMBINIT_ANALOGY_QUESTIONS")
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    limits = [int(x) for x in args.limits.split(",")]
    ours = run_embinit(glove, questions, limits)
    print("embinit", json.dumps(ours, indent=1), flush=True)
    table4 = run_table4_multi30k(glove, questions, Path(args.multi30k)) if args.multi30k else None
    theirs = {} if args.skip_gensim else run_gensim(glove, questions, limits)
    print("gensim", json.dumps(theirs, indent=1), flush=True)
    compare = {}
    for limit in map(str, limits) if theirs else ():
        a, b = ours[limit], theirs[limit]
        compare[limit] = {"accuracy_diff_points": a["accuracy"] - b["accuracy"],
                          "same_within_0.1": abs(a["accuracy"] - b["accuracy"]) <= 0.1,
                          "same_total": a["total"] == b["total"],
                          "gensim_over_embinit_time": b["time_s"] / a["time_s"],
                          "gensim_over_embinit_cpu": b["cpu_s"] / a["cpu_s"]}
    result = {"benchmark": "analogy", "vectors": str(glove), "questions": str(questions),
              "machine": machine(), "embinit": ours, "gensim": theirs, "compare": compare,
              "table4_multi30k": table4}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(compare, indent=1))


if __name__ == "__main__":
    main()
