"""`embinit embeddings stats`: build a table for a vocabulary and print its statistics."""

from __future__ import annotations

import json
import sys

from embinit.cli.arg_types import positive_float, positive_int


def register(subparsers) -> None:
    p = subparsers.add_parser("embeddings", help="embedding tables: statistics")
    sub = p.add_subparsers(dest="embeddings_command", metavar="SUBCOMMAND", required=True)
    s = sub.add_parser("stats", help="build a table by an init spec and print its statistics")
    s.add_argument("--vocab", required=True, help="vocabulary file: one token per line, optional TAB count")
    s.add_argument("--init", required=True, help="init spec, e.g. xavier, glove+standardize (see `embinit inits`)")
    s.add_argument("--pretrained", help="path or hub id of the pretrained source")
    s.add_argument("--oov", help="rule for rows the source lacks (default: xavier)")
    s.add_argument("--dim", type=int, help="D; required for random inits, checked against a pretrained source")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--lowercase", action="store_true", help="look up token.lower() when a token is missing")
    s.add_argument("--pe-length", type=positive_int, default=5000,
                   help="positions of the encoding table compared (default 5000, the paper's Table 6); a "
                        "trial's pe_positions")
    s.add_argument("--pe-base", type=positive_float, default=10000.0,
                   help="base of the encodings' wavelengths (default 10000); a trial's pe_base. Both set the "
                        "table that absorption is measured on and that rescale=absorption:R targets")
    s.add_argument("--cache-dir", help="cache for aligned pretrained rows (default: $EMBINIT_CACHE_DIR)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    s.set_defaults(func=run_stats)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def oov_note(rule: str, inits: list, same: str) -> str:
    """The note that `--oov RULE` changes nothing for `inits` (init specs none of whose tables has a row an
    OOV rule fills, `oov_applies`); `same`: what stays the same whatever the rule ("the table")."""
    from embinit.init.registry import parse_init_spec   # no torch
    specs = [parse_init_spec(init) for init in inits]
    names = ", ".join(dict.fromkeys(f"{s.label} ({s})" for s in specs))
    tables = "its table" if len(specs) == 1 else "their tables"
    return (f"note: --oov {rule} does not apply to {names}: no row of {tables} is left for an OOV rule (a random "
            f"init draws every row, match replaces every row); {same} is the same whatever the rule")


def run_stats(args) -> int:
    from embinit.errors import EmbinitError, each_read
    from embinit.init import build_table, parse_init_spec
    from embinit.init.registry import oov_applies
    from embinit.stats import PETable, embedding_stats
    from embinit.vocab import Vocab

    vocab, spec = each_read("cannot build the table", [lambda: Vocab.load(args.vocab),
                                                       lambda: parse_init_spec(args.init)])
    if args.lowercase:
        spec = parse_init_spec({**spec.to_dict(), "lowercase": True})
    if args.oov == "focus" and oov_applies(spec):
        raise EmbinitError("--oov focus learns its fastText vectors from a task's training text, which `embinit "
                           "embeddings stats` does not have (it reads a vocabulary file only): train a trial with "
                           "it (`embinit train --task TASK --init ... --oov focus`), whose init/emb/* statistics "
                           "(emb_stats.json) are this table's, or choose another rule")
    pe = PETable(args.pe_length, args.pe_base)   # one table for the absorption target and the statistic
    res = build_table(spec, vocab, dim=args.dim, seed=args.seed, pretrained=args.pretrained, oov=args.oov,
                      cache_dir=args.cache_dir, pe=pe)
    if args.oov and not oov_applies(spec):   # a known rule (build_table refuses others) that changes nothing
        print(oov_note(args.oov, [spec], "the table"), file=sys.stderr)
    stats = embedding_stats(res.table, pe_length=pe.positions, pe_base=pe.base, coverage=res.coverage)
    if args.json:
        print(json.dumps({"init": str(spec), "label": res.label, "rows": len(vocab), "dim": res.dim,
                          "seed": args.seed, "oov": res.oov, "source": res.source, "coverage": res.coverage,
                          "source_stats": res.source_stats, "stats": stats}, indent=2))
        return 0
    print(f"{res.label}  ({spec}, {len(vocab)} x {res.dim}, seed {args.seed}"
          + (f", oov {res.oov}" if res.oov else "") + ")")
    if res.source:
        print(f"source: {res.source}")
    if res.source_stats:
        print("source rows: " + ", ".join(f"{k} {_fmt(v)}" for k, v in res.source_stats.items()))
    width = max(len(k) for k in stats)
    print(f"{'statistic':<{width}}  value")
    for key, value in stats.items():
        print(f"{key:<{width}}  {_fmt(value)}")
    return 0
