"""The report as a LaTeX table for a paper (`embinit report EXP --format latex`, the API's
`?format=latex`): the paper's Table 1 layout, one row per init (with its axes and differing settings),
one column per task and reported metric, each cell mean (σ) over seeds.

Marks, all explained in the caption the table carries:
- bold: the best mean of its column among the cells that lost no seed to divergence (the metric's
  direction: a lower loss or perplexity is the better; accuracies, logged as fractions, are printed in
  percent): a mean over the survivors is not the best of the column;
- ↑ / ↓: the paired 95% interval of the difference from the baseline init (`embinit.report.baseline`)
  lies above / below 0 in the better / worse direction; no mark: inconclusive, or the baseline itself;
- †: best epoch = last epoch for most seeds (still improving: a budget comparison);
- ‡: some seeds diverged (the caption says how many): the mean is the survivors', and no ↑ is given on
  the survivors alone (`embinit.report.baseline.with_divergence`);
- a subscript n where a cell's seed count differs from the table's usual one; `--` where a cell has
  no finished seed (`--‡` where every seed diverged);
- an experiment with planned trials that have no result (still running, failed, never started) says so
  in the caption and in a comment line above the table (`embinit.report.completeness.sentence`).
With a search, each cell is its init's best search point (listed under the table). Needs booktabs.
"""

from __future__ import annotations

import json

from collections import Counter
from typing import Any

from embinit.comparison import higher_is_better
from embinit.report.formatting import decimals, is_fraction, number
from embinit.report.notes import row_name, selected_on_dev
from embinit.tracking.run_names import value_text

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_METRIC_NAMES = {"bleu": "BLEU", "acc": "Acc.", "acc_matched": "Acc. (m)", "acc_mismatched": "Acc. (mm)",
                 "ppl": "PPL", "loss": "Loss"}


def escape(text: Any) -> str:
    """`text` with LaTeX's special characters escaped (labels such as GloVe_Xavier)."""
    return "".join(_SPECIAL.get(c, c) for c in str(text))


def _row_key(r: dict[str, Any]) -> str:
    """The row's name without its search point (a point is per task: the caption lists them)."""
    return row_name(r, point=False)


def _column(r: dict[str, Any]) -> tuple[str, str]:
    return r["task"], r["metric"]


def _header(task: str, metric: str) -> str:
    base = metric.rsplit("/", 1)[-1]
    arrow = r"$\uparrow$" if higher_is_better(metric) else r"$\downarrow$"
    unit = r" (\%)" if is_fraction(metric) else ""
    return f"{escape(task)} {escape(_METRIC_NAMES.get(base, base))}{unit} {arrow}"


def _best(rows: list[dict[str, Any]]) -> dict[tuple, float]:
    """The best mean of each column, among the rows that lost no seed to divergence."""
    best: dict[tuple, float] = {}
    for r in rows:
        if r["mean"] is None or r.get("diverged"):
            continue
        col, hib = _column(r), higher_is_better(r["metric"])
        if col not in best or (r["mean"] > best[col] if hib else r["mean"] < best[col]):
            best[col] = r["mean"]
    return best


def _scale(r: dict[str, Any]) -> float:
    return 100.0 if is_fraction(r["metric"]) else 1.0    # accuracies in percent, as papers print them


def _cell(r: dict[str, Any] | None, best: dict[tuple, float], usual_n: int | None, digits: int) -> str:
    if r is None or r["mean"] is None:
        return r"--$^{\ddagger}$" if r is not None and r.get("diverged") else "--"   # ‡: every seed diverged
    scale = _scale(r)
    mean = number(r["mean"] * scale, digits)
    if best.get(_column(r)) == r["mean"] and not r.get("diverged"):
        mean = rf"\textbf{{{mean}}}"
    text = mean + (f" ({number(r['std'] * scale, digits)})" if r.get("std") is not None else "")
    marks = ""
    c = r.get("vs_baseline") or {}
    arrow = {"better": r"\uparrow", "worse": r"\downarrow"}.get(c.get("verdict"), "")
    marks += f"({arrow})" if arrow and c.get("holds_after_holm") is False else arrow
    marks += r"\dagger" if r.get("still_improving") else ""
    marks += r"\ddagger" if r.get("diverged") else ""
    if marks:
        text += f"$^{{{marks}}}$"
    if r["n"] != usual_n:
        text += f"$_{{n={r['n']}}}$"
    return text


def to_latex(experiment: str, rows: list[dict[str, Any]], baseline: str, digits: int = 2,
             incomplete: str | None = None) -> str:
    """The rows of a report (`embinit.report.table.Report.rows`) as a booktabs table; `incomplete`: the sentence
    saying which planned trials have no result (None: every one has)."""
    columns = list(dict.fromkeys(_column(r) for r in rows))
    inits = list(dict.fromkeys(_row_key(r) for r in rows))
    cells = {(_row_key(r), _column(r)): r for r in rows}
    places = {c: decimals([_scale(r) * r["mean"] for r in rows if _column(r) == c and r["mean"] is not None], digits)
              for c in columns}   # a column's means to two significant digits at least
    best = _best(rows)
    counts = Counter(r["n"] for r in rows if r["n"])
    usual_n = counts.most_common(1)[0][0] if counts else None
    lines = [f"% {incomplete}"] if incomplete else []
    lines += [f"% embinit report {experiment!s}: mean (std) over seeds; needs \\usepackage{{booktabs}}",
             r"\begin{table}[t]", r"\centering", r"\begin{tabular}{l" + "c" * len(columns) + "}", r"\toprule",
             " & ".join(["Init", *(_header(*c) for c in columns)]) + r" \\", r"\midrule"]
    for init in inits:
        lines.append(" & ".join([escape(init), *(_cell(cells.get((init, c)), best, usual_n, places[c])
                                                 for c in columns)]) + r" \\")
    caption = _caption(experiment, rows, baseline, usual_n, incomplete)
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _caption(experiment: str, rows: list[dict[str, Any]], baseline: str, usual_n: int | None,
             incomplete: str | None = None) -> str:
    seeds = f"over {usual_n} seed{'' if usual_n == 1 else 's'}" if usual_n else "over seeds"
    parts = [f"{escape(experiment)}: mean (standard deviation) {seeds}; bold: the best mean of each column."]
    if any(r.get("vs_baseline") for r in rows):
        parts.append(rf"$\uparrow$/$\downarrow$: better/worse than {escape(baseline)} (the 95\% confidence "
                     "interval of the difference, paired on the seeds both share, excludes 0).")
    if any((r.get("vs_baseline") or {}).get("holds_after_holm") is False for r in rows):
        several = len({json.dumps((r.get("vs_baseline") or {}).get("holm_family") or {}, sort_keys=True, default=str)
                       for r in rows if r.get("vs_baseline")}) > 1
        parts.append(r"In parentheses: not after Holm's correction for the comparisons with "
                     f"{escape(baseline)} in the same column (task and metric"
                     f"{', and configuration' if several else ''}).")
    if any(r.get("still_improving") for r in rows):
        parts.append(r"$\dagger$: the best epoch was the last for most seeds (still improving).")
    if any(r.get("one_epoch") for r in rows):
        parts.append("Some rows trained for one epoch: their best epoch is the only one, so nothing shows "
                     "whether they were still improving.")
    lost = [r for r in rows if r.get("diverged")]
    if lost:
        which = "; ".join(f"{escape(_row_key(r))} on {escape(r['task'])}: {r['diverged']} of "
                          f"{r['diverged'] + r['n'] + (r.get('non_finite') or 0) + (r.get('no_value') or 0)}"
                          for r in lost)
        parts.append(r"$\ddagger$: seeds diverged (" + which + "); the mean is over the survivors, is never bold, "
                     r"and is not marked $\uparrow$ on the survivors alone"
                     + (r"; --$^{\ddagger}$: every seed diverged." if any(r["mean"] is None for r in lost) else "."))
    if any(r["n"] != usual_n for r in rows if r["mean"] is not None):
        parts.append("$n$: the number of seeds where it differs.")
    points = {(r["init"], r["task"]): r["point"] for r in rows if r.get("point")}
    if points:
        chosen = "; ".join(f"{escape(init)} on {escape(task)}: " + escape(", ".join(
            f"{k}={value_text(v)}" for k, v in point.items())) for (init, task), point in points.items())
        parts.append(f"Best search point per init: {chosen}.")
    tables = {(r["init"], r["task"]): r["tables"] for r in rows if r.get("tables")}
    if tables:
        parts.append("Source (encoder) table initialized otherwise than the target table the row names: " + "; ".join(
            f"{escape(init)} on {escape(task)}: source {escape(t['source'])}" for (init, task), t in tables.items())
            + ".")
    dev = sorted({r["metric"] for r in rows if selected_on_dev(r["metric"])})
    if dev:
        parts.append(f"{escape(', '.join(dev))}: dev, selected on dev (the best epoch and search point are chosen "
                     "on the dev set reported).")
    if any(r["mean"] is None and not r.get("diverged") for r in rows):
        parts.append("--: no finished seed.")
    if incomplete:
        parts.append(escape(incomplete))
    return " ".join(parts)
