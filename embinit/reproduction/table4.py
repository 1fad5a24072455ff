"""The reproduction's Table 4: word analogies under the paper's transformation chain, read from the
`analogy` runs (`embinit analogy --table4 --log-experiment NAME`), and accuracy against σ(words)/σ(PE).
`table4_rows` is what the section shows and what Finding 2 reads (embinit.reproduction.findings)."""

from __future__ import annotations

import statistics
from pathlib import Path

from embinit import paper
from embinit.report import summarize
from embinit.reproduction.compare import ci_text, fmt, mean_std
from embinit.reproduction.data import ReproductionData
from embinit.reproduction.export import Section


def table4_rows(results: list[dict]) -> list[dict]:
    """One row per step of the transformation chain: the seeds' accuracies summarized (percentages)."""
    rows = []
    for i, row in enumerate(results[0]["rows"] if results else []):
        accs = [r["rows"][i]["accuracy"] for r in results if r["rows"][i]["accuracy"] is not None]
        ratios = [r["rows"][i]["pe_ratio"] for r in results if r["rows"][i].get("pe_ratio") is not None]
        rows.append({"row": row["label"], "steps": row["steps"], "paper": row.get("paper"), "total": row["total"],
                     "correct": [r["rows"][i]["correct"] for r in results],
                     "pe_ratio": statistics.fmean(ratios) if ratios else None,
                     **summarize(accs, (0.0, 100.0))})
    return rows


def table4_section(rep: ReproductionData) -> Section:
    s = Section("Table 4: word analogies under the paper's transformation chain")
    runs = rep.analogy_runs
    if not runs:
        s.lines.append(f"No `analogy` runs in experiment `{rep.inputs.analogy_experiment}`.")
        return s
    results = rep.analogy_results
    prm = results[0].get("params", {})
    s.lines += [f"{len(runs)} runs (seeds of the random positions: "
                f"{', '.join(str(r.get('params', {}).get('seed')) for r in results)}) in experiment "
                f"`{rep.inputs.analogy_experiment}`; embeddings `{Path(str(prm.get('embeddings'))).name}`, "
                f"vocabulary: the {prm.get('top')} most frequent target words of `{prm.get('task')}` "
                f"({prm.get('words')} found in the vectors); questions `{Path(str(prm.get('questions'))).name}`.",
                "", "| row | paper | here correct/applicable | here acc. % mean (σ) | n | 95% CI | "
                "σ(words)/σ(PE) |", "|---|---|---|---|---|---|---|"]
    rows = table4_rows(results)
    for row in rows:
        corr = row["correct"]
        rng = f"{min(corr)}–{max(corr)}" if min(corr) != max(corr) else str(corr[0])
        s.lines.append(f"| {row['row']} | {row['paper'] or '—'} | {rng}/{row['total']} | {mean_std(row, 1)} | "
                       f"{row['n']} | {ci_text(row, 1)} | {fmt(row['pe_ratio'], 3)} |")
    rep.exports["table4"] = rows
    s.lines += ["", *table4_ratio_lines(results, rep.exports)]
    return s


# σ of the paper's tables at D = 300 (Table 6): GloVe 840B raw, a Xavier table (= GloVe_Xavier), the
# position encodings; with them the ratio σ(words)/σ(PE) of each of the paper's Table-4 rows with encodings
def paper_ratio_rows() -> list[dict]:
    g, x, pe = paper.TABLE6["P"][3], paper.TABLE6["Xavier"][3], paper.TABLE6["Pos. Enc."][3]
    return [{"row": "GloVe & Pos. Enc.", "ratio": g / pe, "accuracy": 87.3},
            {"row": "GloVe & Xavier-Std. & Pos. Enc.", "ratio": x / pe, "accuracy": 12.9},
            {"row": "GloVe & (Pos. Enc. × σp/σx)", "ratio": g / (pe * g / x), "accuracy": 11.1}]


def table4_ratio_lines(results: list[dict], exports: dict) -> list[str]:
    """Accuracy against σ(words)/σ(PE): the paper's rows (D = 300, its Table 6 σ) and here (the rows
    above, and the ratio sweep of `embinit analogy --table4`: the same rows rescaled to each ratio)."""
    lines = ["Accuracy against σ(words)/σ(PE), the spread of the word vectors over that of the encodings "
             "added to them. The paper's rows, from its Table 6 σ at D = 300 (GloVe 0.37, Xavier 0.016, "
             "encodings 0.67):", "", "| paper row | σ(words)/σ(PE) | paper acc. % |", "|---|---|---|"]
    paper_rows = paper_ratio_rows()
    lines += [f"| {r['row']} | {r['ratio']:.3f} | {r['accuracy']} |" for r in paper_rows]
    sweeps = [r.get("ratio_sweep") or [] for r in results]
    grid = sorted({x["ratio"] for sw in sweeps for x in sw})
    out = []
    if grid:
        lines += ["", "Here (D of the vectors above): the vectors rescaled so that σ(words)/σ(PE) takes each "
                  "value, one draw of positions per seed, accuracy mean (σ) over the seeds:", "",
                  "| σ(words)/σ(PE) | acc. % mean (σ) | n |", "|---|---|---|"]
        for ratio in grid:
            accs = [x["accuracy"] for sw in sweeps for x in sw if x["ratio"] == ratio and x["accuracy"] is not None]
            st = summarize(accs, (0.0, 100.0))
            lines.append(f"| {ratio:g} | {mean_std(st, 1)} | {st['n']} |")
            out.append({"ratio": ratio, **st})
    else:
        lines += ["", "No ratio sweep in these analogy runs (recorded before `embinit analogy --table4` "
                  "logged one)."]
    exports["table4_ratio"] = {"paper": paper_rows, "here": out}
    return lines
