"""`embinit analogy`: 3CosAdd word-analogy accuracy of an embedding table, optionally transformed by
the paper's Table-4 chain (see embinit.analysis.analogy and embinit.analysis.table4)."""

from __future__ import annotations

import json

from embinit.errors import EmbinitError, each_read
from embinit.tracking.run_records import AnalogyRow, AnalogyRun


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analogy", help="word-analogy accuracy (3CosAdd) of embeddings, with the paper's Table-4 transforms",
        description="Word-analogy accuracy (3CosAdd, question words excluded, case-insensitive) of an "
                    "embedding table. Only questions whose four words are in the vocabulary count.")
    p.add_argument("--embeddings", required=True, metavar="SOURCE",
                   help="GloVe/word2vec text file, .npy (vocabulary beside it), best.pt, or MLflow run id")
    p.add_argument("--questions", required=True, metavar="FILE", help="questions-words.txt format")
    vocab = p.add_mutually_exclusive_group()
    vocab.add_argument("--vocab", metavar="FILE", help="restrict to these tokens (one per line)")
    vocab.add_argument("--task", help="restrict to a task's training vocabulary (target side), e.g. multi30k")
    p.add_argument("--top", type=int, metavar="N",
                   help="with --vocab/--task: the N most frequent non-special tokens (the paper: 5,893); "
                        "alone: the first N rows of SOURCE (gensim's restrict_vocab)")
    p.add_argument("--data-dir", help="the task's data folder (with --task)")
    p.add_argument("--transform", default="", metavar="STEPS",
                   help="comma-separated chain, applied in order: scale, standardize, pe, pe_scaled")
    p.add_argument("--table4", action="store_true",
                   help="run every row of the paper's Table 4 (and scale,pe: the model's actual input)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random positions (pe steps)")
    p.add_argument("--max-len", type=int, default=5000, help="positions drawn from [0, max-len)")
    p.add_argument("--pe-base", type=float, default=10000.0)
    p.add_argument("--key", choices=("tok", "tgt", "src"), help="which table of a checkpoint")
    p.add_argument("--source-name", default=None, help="name in row labels (default GloVe for text files)")
    p.add_argument("--case-sensitive", action="store_true", help="exact-case lookup (default: ignore case)")
    p.add_argument("--sections", action="store_true", help="print the per-section accuracy too")
    p.add_argument("--tracking-uri", help="MLflow tracking URI for run ids")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--log-experiment", metavar="NAME",
                   help="also record the results as an MLflow run (kind 'analogy') in experiment NAME "
                        "at --tracking-uri, for `embinit reproduction`")
    p.set_defaults(func=run)


def _restriction(args) -> list[str] | None:
    """The vocabulary list from --vocab / --task (most frequent first, specials dropped)."""
    from embinit.vocab import Vocab

    if args.vocab:
        v = Vocab.load(args.vocab)
    elif args.task:
        from embinit.tasks import load_task
        v = load_task(args.task, data_dir=args.data_dir).vocab
    else:
        return None
    tokens = [t for t in v.tokens if t not in v.specials]
    if args.top is not None:
        if args.top < 1:
            raise EmbinitError(f"--top must be positive, got {args.top}")
        tokens = tokens[: args.top]
    return tokens


def run(args) -> int:
    import time
    t0 = time.perf_counter()
    from embinit.analysis.analogy import load_questions, select_rows
    from embinit.analysis.sources import load_embeddings
    from embinit.analysis.table4 import EXTRA_ROWS, TABLE4_ROWS, chain_ratio, parse_steps, ratio_sweep, run_table4

    if args.log_experiment:   # the store it will write to, before the analysis: created, upgraded or refused
        from embinit.tracking.prepare import prepare_store
        prepare_store(args.tracking_uri)
    restricted = bool(args.vocab or args.task)   # --top then cuts the restriction, not the table
    steps, questions, wanted, emb = each_read("cannot run the analogy test", [
        lambda: parse_steps(args.transform), lambda: load_questions(args.questions), lambda: _restriction(args),
        lambda: load_embeddings(args.embeddings, key=args.key, tracking_uri=args.tracking_uri,
                                top=None if restricted else args.top)])
    if emb.tokens is None:
        raise EmbinitError(f"{emb.source} has no token names; analogies need them (a vocabulary file "
                           "beside the .npy)")
    matrix, tokens, n_total = emb.matrix, emb.tokens, None
    if wanted is not None:
        matrix, tokens, n_total = select_rows(matrix, tokens, wanted)
    name = args.source_name or ("checkpoint" if emb.config is not None else "GloVe")
    kw = dict(seed=args.seed, n_total=n_total, max_len=args.max_len, pe_base=args.pe_base,
              case_insensitive=not args.case_sensitive)
    rows = TABLE4_ROWS + EXTRA_ROWS if args.table4 else [(steps, None)]
    results = run_table4(matrix, tokens, questions, source=name, rows=rows, **kw)
    ratio_kw = {k: kw[k] for k in ("seed", "n_total", "max_len", "pe_base")}
    ratios = [chain_ratio(matrix, st, **ratio_kw) for st, _ in rows]
    sweep = ratio_sweep(matrix, tokens, questions, seed=args.seed, max_len=args.max_len, pe_base=args.pe_base,
                        case_insensitive=kw["case_insensitive"]) if args.table4 else []
    record = _record(args, emb.source, questions.source, len(tokens), n_total, rows, results, ratios, sweep)
    if args.log_experiment:
        from embinit.tracking import run_writers
        run_id = run_writers.log_analogy_run(args.log_experiment, args.tracking_uri, record,
                                             time.perf_counter() - t0)
        print(f"logged to MLflow run {run_id} (experiment {args.log_experiment!r})")
    if args.json:
        print(json.dumps({"source": emb.source, "questions": questions.source,
                          "rows": [r.to_json() for r in record.rows]}, indent=2))
        return 0
    skipped = f" ({questions.invalid:,} lines not of four words skipped)" if questions.invalid else ""
    print(f"{emb.source}: {len(tokens):,} words; {questions.count:,} questions in {questions.source}{skipped}")
    if n_total is not None and args.top is not None and args.top > n_total:
        print(f"--top {args.top:,} is more than the vocabulary's {n_total:,} words (specials dropped): every "
              "one of them is used")
    _print_rows(args, rows, results, ratios)
    if sweep:
        print("ratio sweep: the same rows rescaled so that σ(words)/σ(PE) is each value, the same positions added")
        for r in sweep:
            print(f"{r['ratio']:<8g} {_fmt(r)}")
    return 0


def _print_rows(args, rows, results, ratios) -> None:
    """One line per chain: accuracy overall, semantic and syntactic, σ(words)/σ(PE) where the chain adds
    encodings (the std of the table just before them over theirs), and the paper's value."""
    from embinit.analysis.table4 import EXTRA_ROWS

    width = max(len(label) for label, _, _ in results)
    print(f"{'embedding':<{width}}  {'total acc. (%)':<20} {'semantic':<20} {'syntactic':<20} "
          f"{'σ(words)/σ(PE)':<15} paper")
    extra = {r[0] for r in EXTRA_ROWS} if args.table4 else set()
    for (st, _), (label, paper, res), ratio in zip(rows, results, ratios):
        paper = paper or ("(not in the paper)" if st in extra else "")
        d = res.to_dict()
        sem, syn = d["semantic"], d["syntactic"]
        shown = "-" if ratio is None else f"{ratio:.3g}"
        print(f"{label:<{width}}  {res.summary_line():<20} {_fmt(sem):<20} {_fmt(syn):<20} {shown:<15} {paper}")
        if args.sections:
            for sec, s in d["sections"].items():
                print(f"    {sec:<{width - 4}}  {_fmt(s)}  (oov {s['oov']})")


def _record(args, source: str, questions: str, n_words: int, n_vocab: int | None, rows, results, ratios,
            sweep) -> AnalogyRun:
    """What the run records (`embinit.tracking.run_records.AnalogyRun`): each row's result and σ(words)/σ(PE),
    the ratio sweep, and the arguments it ran with; with --task/--vocab, `vocab_words` is how many words the
    restriction held (after --top), so a --top above the vocabulary's size is not read as a cut."""
    params = {"embeddings": source, "questions": questions, "words": n_words,
              **({"vocab_words": n_vocab} if n_vocab is not None else {}), "task": args.task or "",
              "vocab": args.vocab or "", "top": args.top if args.top is not None else "", "seed": args.seed,
              "max_len": args.max_len, "pe_base": args.pe_base, "case_sensitive": args.case_sensitive}
    return AnalogyRun(tuple(AnalogyRow.of(st, res.to_dict(), paper, ratio)
                            for (st, _), (_, paper, res), ratio in zip(rows, results, ratios)),
                      params, tuple(sweep))


def _fmt(d: dict) -> str:
    acc = d.get("accuracy")
    return f"{d['correct']}/{d['total']} ({'n/a' if acc is None else f'{acc:.1f}'})"
