"""The reproduction's Table 4: word analogies under the paper's transformation chain, read from the
`analogy` runs (`embinit analogy --table4 --log-experiment NAME`), and accuracy against σ(words)/σ(PE).
`table4_rows` is what the section shows and what Finding 2 reads (embinit.reproduction.findings)."""

from __future__ import annotations

import statistics
from pathlib import Path

from embinit import paper
from embinit.report.table import summarize
from embinit.reproduction.compare import ci_text, fmt, mean_std
from embinit.reproduction.data import ReproductionData
from embinit.reproduction.export import Section
from embinit.reproduction.table4_runs import vocabulary_text
from embinit.tracking.run_records import AnalogyRun


def table4_rows(results: list[AnalogyRun]) -> list[dict]:
    """One row per step of the transformation chain, matched across the runs by its slug (a run logged
    without --table4 has one row): the accuracies of the runs that have it summarized (percentages).
    Rows in the order of the run with the most of them, then any only others have."""
    fullest = sorted(results, key=lambda r: -len(r.rows))
    rows = []
    for slug in dict.fromkeys(row.slug for r in fullest for row in r.rows):
        pairs = [(r, row) for r in results if (row := r.row(slug)) is not None]
        hits = [h for _, h in pairs]
        first = hits[0]
        accs = [h.accuracy for h in hits if h.accuracy is not None]
        ratios = [h.pe_ratio for h in hits if h.pe_ratio is not None]
        rows.append({"row": first.label, "slug": slug, "steps": list(first.steps), "paper": first.paper,
                     "total": first.total, "correct": [h.correct for h in hits],
                     "pe_ratio": statistics.fmean(ratios) if ratios else None,
                     **summarize(accs, (0.0, 100.0)),
                     # what the summary is computed from, per seed of the positions (review M6)
                     "per_seed": {str(r.seed): {"value": h.accuracy, "correct": h.correct, "total": h.total,
                                                "run_id": r.run_id} for r, h in pairs if h.accuracy is not None}})
    return rows


def table4_section(rep: ReproductionData) -> Section:
    s = Section("Table 4: word analogies under the paper's transformation chain")
    runs, results = rep.analogy_runs, rep.analogy_results
    if not runs:
        s.lines.append(f"No `analogy` runs in experiment `{rep.inputs.analogy_experiment}`.")
        return s
    skipped = [f"- skipped: {note}" for note in rep.analogy_notes]
    if not results:
        s.lines += [f"No readable `analogy` run in experiment `{rep.inputs.analogy_experiment}`:", "", *skipped]
        return s
    # one configuration; a run that recorded the restriction's size (`vocab_words`) says the vocabulary best
    prm = next((r.params for r in results if "vocab_words" in r.params), results[0].params)
    chosen = rep.analogy_selection
    repeated = "; an earlier run of a seed is left out (the newest finished run of each seed counts)" \
        if chosen.repeated else ""
    left = [f"- left out: {note}" for note in chosen.repeated + chosen.other_configs]
    apart = " Runs of other configurations are not pooled with these (left out below)." if chosen.other_configs \
        else ""
    s.lines += [f"{len(results)} run{'s' if len(results) != 1 else ''}, one per seed of the random positions "
                f"({', '.join(str(r.seed) for r in results)}){repeated}, in experiment "
                f"`{rep.inputs.analogy_experiment}`; embeddings `{Path(str(prm.get('embeddings'))).name}`, "
                f"vocabulary: {vocabulary_text(prm)}; questions `{Path(str(prm.get('questions'))).name}`."
                f"{apart}",
                *([""] + skipped + left if skipped or left else []),
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


def table4_ratio_lines(results: list[AnalogyRun], exports: dict) -> list[str]:
    """Accuracy against σ(words)/σ(PE): the paper's rows (D = 300, its Table 6 σ) and here (the rows
    above, and the ratio sweep of `embinit analogy --table4`: the same rows rescaled to each ratio)."""
    lines = ["Accuracy against σ(words)/σ(PE), the spread of the word vectors over that of the encodings "
             "added to them. The paper's rows, from its Table 6 σ at D = 300 (GloVe 0.37, Xavier 0.016, "
             "encodings 0.67):", "", "| paper row | σ(words)/σ(PE) | paper acc. % |", "|---|---|---|"]
    paper_rows = paper_ratio_rows()
    lines += [f"| {r['row']} | {r['ratio']:.3f} | {r['accuracy']} |" for r in paper_rows]
    sweeps = [r.ratio_sweep for r in results]
    grid = sorted({x["ratio"] for sw in sweeps for x in sw})
    out = []
    if grid:
        lines += ["", "Here (D of the vectors above): the vectors rescaled so that σ(words)/σ(PE) takes each "
                  "value, one draw of positions per seed, accuracy mean (σ) over the seeds:", "",
                  "| σ(words)/σ(PE) | acc. % mean (σ) | n |", "|---|---|---|"]
        for ratio in grid:
            got = [(r, x) for r in results for x in r.ratio_sweep if x["ratio"] == ratio and x["accuracy"] is not None]
            st = summarize([x["accuracy"] for _, x in got], (0.0, 100.0))
            lines.append(f"| {ratio:g} | {mean_std(st, 1)} | {st['n']} |")
            out.append({"ratio": ratio, **st, "per_seed": {str(r.seed): {"value": x["accuracy"], "run_id": r.run_id}
                                                            for r, x in got}})
    else:
        lines += ["", "No ratio sweep in these analogy runs (recorded before `embinit analogy --table4` "
                  "logged one)."]
    exports["table4_ratio"] = {"paper": paper_rows, "here": out}
    return lines
