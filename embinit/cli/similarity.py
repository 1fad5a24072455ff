"""`embinit similarity A B`: KNN match similarity between two embedding tables (the butterfly-effect
post's measure; see embinit.analysis.similarity).

A and B are checkpoints (best.pt), embedding files (.npy with its vocabulary, GloVe/word2vec text) or
MLflow run ids. When both name their tokens, the tables are aligned on the tokens they share (in A's
order) and neighbours are searched among those only; when either has no token names, rows are matched
by index and the tables must have the same number of rows.

Cost: exact neighbours need N^2/2 inner products per table (blocked, memory O(N K)): 50,257 x 512
tables took 62 CPU-seconds for both on this project's 2-core machine; use --top for large files.
"""

from __future__ import annotations

import argparse
import json

from embinit.errors import EmbinitError, each_read


def register(subparsers) -> None:
    p = subparsers.add_parser("similarity", help="KNN match similarity between two embedding tables",
                              description=" ".join(__doc__.split("\n\n")[::2]).replace("\n", " "))
    p.add_argument("a", metavar="A", help="checkpoint, embedding file or MLflow run id")
    p.add_argument("b", metavar="B", help="checkpoint, embedding file or MLflow run id")
    p.add_argument("--k", type=int, default=10, help="neighbours per token (default 10, as the post)")
    p.add_argument("--metric", choices=("jaccard", "overlap"), default="jaccard",
                   help="jaccard: |∩|/|∪| (the post's formula); overlap: |∩|/K (the post's code)")
    p.add_argument("--neighbours", choices=("dot", "cosine"), default="dot",
                   help="closeness within a space: inner product (the post) or cosine")
    p.add_argument("--key", choices=("tok", "tgt", "src"), help="which table of a checkpoint (both sides)")
    p.add_argument("--top", type=int, metavar="N", help="only the first N rows of each table")
    p.add_argument("--weights", metavar="VOCAB", help="vocabulary file with counts: frequency-weighted "
                                                      "aggregates (tokens without a count weigh 0)")
    p.add_argument("--exclude-punctuation", action="store_true",
                   help="leave punctuation-only tokens out of the aggregates")
    p.add_argument("--block-size", type=int, default=2048, help=argparse.SUPPRESS)
    p.add_argument("--tracking-uri", help="MLflow tracking URI for run ids")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def _paired(ea, eb):
    """(tokens or None, matrix A, matrix B, note) with rows matched."""
    from embinit.analysis.similarity import align

    if ea.tokens is not None and eb.tokens is not None:
        tokens, a, b = align(ea.tokens, ea.matrix, eb.tokens, eb.matrix)
        note = None if len(tokens) == len(ea.tokens) == len(eb.tokens) else \
            f"aligned on {len(tokens):,} shared tokens (A {len(ea.tokens):,}, B {len(eb.tokens):,})"
        return tokens, a, b, note
    if ea.matrix.shape[0] != eb.matrix.shape[0]:
        raise EmbinitError(f"cannot match rows: {ea.source} has {ea.matrix.shape[0]} rows and no token "
                           f"names or {eb.source} has none, and {eb.matrix.shape[0]} rows")
    return ea.tokens or eb.tokens, ea.matrix, eb.matrix, "rows matched by index (no token names)"


def _weights(path: str | None, tokens):
    if path is None:
        return None
    from embinit.vocab import Vocab
    if tokens is None:
        raise EmbinitError("--weights needs tables with token names")
    counts = Vocab.load(path).counts
    if not counts:
        raise EmbinitError(f"{path} has no counts (expected `token<TAB>count` lines)")
    import torch   # not at import: the CLI's parser imports every subcommand
    return torch.tensor([float(counts.get(t, 0)) for t in tokens], dtype=torch.float64)


SCORE_TEXT = {"jaccard": "|∩|/|∪|, the post's formula", "overlap": "|∩|/K, the post's code and numbers"}


def both_scores(res) -> dict:
    """{score: {mean, median}} for both scores, from the one set of shared-neighbour counts."""
    from embinit.analysis.similarity import SCORES, summarize
    inter, k = res.intersections.double(), res.k
    per = {"jaccard": inter / (2 * k - inter), "overlap": inter / k}
    return {m: {key: summarize(per[m], res.intersections, k, res.included)[key] for key in ("mean", "median")}
            for m in SCORES}


def run(args) -> int:
    from embinit.analysis.similarity import knn_match_similarity
    from embinit.analysis.sources import load_embeddings

    ea, eb = each_read("cannot compare the tables", [
        lambda: load_embeddings(args.a, key=args.key, top=args.top, tracking_uri=args.tracking_uri),
        lambda: load_embeddings(args.b, key=args.key, top=args.top, tracking_uri=args.tracking_uri)])
    tokens, a, b, note = _paired(ea, eb)
    if args.exclude_punctuation and tokens is None:
        raise EmbinitError("--exclude-punctuation needs tables with token names")
    res = knn_match_similarity(a, b, k=args.k, metric=args.metric, neighbours=args.neighbours,
                               weights=_weights(args.weights, tokens), tokens=tokens,
                               exclude_punctuation=args.exclude_punctuation, block_size=args.block_size)
    out = {"a": ea.source, "b": eb.source, "k": args.k, "metric": args.metric,
           "neighbours": args.neighbours, "dims": [int(a.shape[1]), int(b.shape[1])],
           "alignment": note, **res.summary, "scores": both_scores(res)}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"A: {ea.source}  (D={a.shape[1]})\nB: {eb.source}  (D={b.shape[1]})")
    if note:
        print(note)
    s = res.summary
    print(f"KNN match similarity ({args.metric}, K={args.k}, {args.neighbours}) over {s['tokens']:,} tokens: "
          f"mean {s['mean']:.4f}, median {s['median']:.4f}")
    other = next(m for m in out["scores"] if m != args.metric)
    print(f"beside it, {other} ({SCORE_TEXT[other]}): mean {out['scores'][other]['mean']:.4f}, "
          f"median {out['scores'][other]['median']:.4f}")
    if "weighted_mean" in s:
        print(f"frequency-weighted: mean {s['weighted_mean']:.4f}, median {s['weighted_median']:.4f}")
    print("shared neighbours: " + "  ".join(f"{i}:{c}" for i, c in enumerate(s["histogram"])))
    return 0
