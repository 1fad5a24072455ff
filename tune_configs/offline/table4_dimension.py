"""Does the embedding dimension explain Table 4's gap? The paper keeps 87.3% of the analogies after adding
the position encodings to 300d GloVe (σ(words)/σ(PE) = 0.37/0.67 = 0.55); the offline reproduction, at
D = 50, answers ~1% at the same ratio. Only 50d GloVe is at hand, so this takes a model that has a wider
table, a Hugging Face model's input embedding (its whole-word rows), and compares Table 4's ratio sweep
(`embinit.analysis.table4.ratio_sweep`: the rows rescaled so that σ(words)/σ(PE) is each value, the same
random positions added) on that table at its own D and on its top principal components (D = 50 by
default, rescaled to the table's element σ). If the dimension were the cause, the full table would keep
its accuracy at a ratio of ~0.5 where the 50-dimensional one loses it.

    python tune_configs/offline/table4_dimension.py all-MiniLM-L6-v2/ questions-words.txt \
        --task multi30k --data-dir data/multi30k --out table4_dimension.json

Prints one line per ratio (accuracy mean over the seeds of the positions, per table) and writes the same
as JSON to --out. The vocabulary is restricted as `embinit analogy --task/--vocab` restricts it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch


def whole_words(folder: str) -> tuple[torch.Tensor, list[str]]:
    """The model's input-embedding rows of its whole-word tokens (ASCII letters only: no `##` piece, no
    special, no punctuation), as embinit's Hugging Face loader reads the matrix."""
    from embinit.init.hf import load_model_embeddings
    tok, weight = load_model_embeddings(folder)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    keep = [(i, t) for t, i in vocab if i < weight.shape[0] and t.isascii() and t.isalpha()]
    if not keep:
        raise SystemExit(f"table4_dimension: {folder}'s tokenizer has no whole-word token")
    return weight[[i for i, _ in keep]].double(), [t for _, t in keep]


def top_components(x: torch.Tensor, dims: int) -> torch.Tensor:
    """`x` centred and projected on its `dims` leading principal directions, rescaled to `x`'s element σ."""
    if not 0 < dims <= min(x.shape):
        raise SystemExit(f"table4_dimension: --dims {dims} must be between 1 and {min(x.shape)}")
    centred = x - x.mean(0)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    low = centred @ v[:dims].T
    return low * (x.std() / low.std())


def restriction(task: str | None, data_dir: str | None, vocab: str | None) -> list[str] | None:
    """The words `embinit analogy --task/--vocab` keeps (most frequent first, specials dropped)."""
    from embinit.vocab import Vocab
    if vocab:
        v = Vocab.load(vocab)
    elif task:
        from embinit.tasks import load_task
        v = load_task(task, data_dir=data_dir).vocab
    else:
        return None
    return [t for t in v.tokens if t not in v.specials]


def sweep(x: torch.Tensor, tokens: list[str], questions, seeds: list[int]) -> dict:
    """Raw accuracy and the ratio sweep's accuracy per ratio (mean and per seed) of one table."""
    from embinit.analysis.analogy import evaluate_analogies
    from embinit.analysis.table4 import ratio_sweep
    raw = evaluate_analogies(x.float(), tokens, questions).to_dict()
    runs = [ratio_sweep(x, tokens, questions, seed=s) for s in seeds]
    ratios = [{"ratio": r["ratio"], "total": r["total"], "accuracy": [run[i]["accuracy"] for run in runs]}
              for i, r in enumerate(runs[0])]
    for r in ratios:
        r["mean"] = None if None in r["accuracy"] else statistics.fmean(r["accuracy"])
    return {"dims": int(x.shape[1]), "words": len(tokens), "raw": raw["accuracy"], "applicable": raw["total"],
            "ratios": ratios}


def _pct(value: float | None) -> str:
    return f"{'n/a' if value is None else f'{value:.1f}':<8}"   # n/a: no applicable analogy


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a Hugging Face model folder (its input embedding and tokenizer)")
    ap.add_argument("questions", help="questions-words.txt")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--task", help="restrict to this task's target vocabulary (e.g. multi30k)")
    where.add_argument("--vocab", help="restrict to these tokens (one per line)")
    ap.add_argument("--data-dir", help="the task's data folder (with --task)")
    ap.add_argument("--dims", type=int, nargs="+", default=[50], help="the reduced tables' dimensions")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the random positions")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args(argv)

    from embinit.analysis.analogy import load_questions, select_rows
    questions = load_questions(args.questions)
    x, tokens = whole_words(args.model)
    tables = [x] + [top_components(x, d) for d in args.dims]   # reduced over every whole word, then cut
    wanted = restriction(args.task, args.data_dir, args.vocab)
    results = []
    for table in tables:
        matrix, names = (table, tokens) if wanted is None else select_rows(table, tokens, wanted)[:2]
        results.append(sweep(matrix, list(names), questions, args.seeds))
    out = {"model": Path(args.model).name, "seeds": args.seeds, "tables": results}
    head = "σ(words)/σ(PE)  " + "  ".join(f"D={t['dims']:<6}" for t in results)
    print(f"{out['model']}: {results[0]['words']:,} words, {results[0]['applicable']:,} applicable analogies, "
          f"seeds {args.seeds}; accuracy % (mean over the seeds)\n{head}")
    print("raw" + " " * 13 + "  ".join(_pct(t["raw"]) for t in results))
    for i, r in enumerate(results[0]["ratios"]):
        print(f"{r['ratio']:<16g}" + "  ".join(_pct(t["ratios"][i]["mean"]) for t in results))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
