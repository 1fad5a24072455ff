"""The report's answer to "which init won, by how much": each row's difference from the baseline init's
row of the same task, axes and metric (Xavier by default), with a 95% interval and a verdict.

The interval is `embinit.comparison.paired`: paired t on the seeds both rows share (`pairs`), Welch only
when they share none. The verdict knows the metric's direction: a lower loss or perplexity is better.
"""

from __future__ import annotations

import json
from typing import Any

from embinit.comparison import direction, higher_is_better, paired
from embinit.errors import EmbinitError, did_you_mean
from embinit.formatting import number

DEFAULT_BASELINE = "Xavier"


def check_baseline(baseline: str, labels: set[str]) -> None:
    """An error naming `baseline` and the init labels the experiment has, when it is not one of them."""
    if labels and baseline not in labels:
        raise EmbinitError(f"baseline {baseline!r} is not an init of this experiment; choose from "
                           f"{sorted(labels)}{did_you_mean(baseline, labels)}")


def _slot(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["task"], json.dumps(row["axes"], sort_keys=True), row["metric"]


def _baseline_row(row: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The baseline row for `row`: the one with the same setting, else the only one of its slot."""
    same = [c for c in candidates if c["setting"] == row["setting"]]
    if same:
        return same[0]
    return candidates[0] if len(candidates) == 1 else None


def compare_rows(rows: list[dict[str, Any]], baseline: str) -> None:
    """Set each row's `vs_baseline` (None for the baseline's own rows and where it has no row)."""
    base: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["init"] == baseline:
            base.setdefault(_slot(r), []).append(r)
    for r in rows:
        b = None if r["init"] == baseline else _baseline_row(r, base.get(_slot(r), []))
        r["vs_baseline"] = None if b is None or not r["seeds"] or not b["seeds"] else {
            **comparison(r["seeds"], b["seeds"], r["metric"], baseline),
            "still_improving": bool(r.get("still_improving") or b.get("still_improving"))}


def comparison(a: dict[str, float], b: dict[str, float], metric: str, baseline: str) -> dict[str, Any]:
    """a − b for {seed: value} dicts on `metric`: difference, 95% interval, test, pairs and verdict."""
    c = paired(a, b)
    low = high = None
    if c["diff"] is not None and c["ci95"] is not None:
        low, high = c["diff"] - c["ci95"], c["diff"] + c["ci95"]
    return {"baseline": baseline, "diff": c["diff"], "ci95": c["ci95"], "ci_low": low, "ci_high": high,
            "test": c["test"], "pairs": c["pairs"], "n": list(c["n"]),
            "higher_is_better": higher_is_better(metric), "verdict": direction(c, metric)}


def csv_columns(row: dict[str, Any]) -> dict[str, Any]:
    """The comparison as flat CSV columns (empty for a row without one)."""
    c = row.get("vs_baseline") or {}
    return {"baseline": c.get("baseline", ""), "diff": c.get("diff"), "diff_ci_low": c.get("ci_low"),
            "diff_ci_high": c.get("ci_high"), "test": c.get("test", ""), "pairs": c.get("pairs"),
            "verdict": c.get("verdict", "")}


CSV_COLUMNS = ["baseline", "diff", "diff_ci_low", "diff_ci_high", "test", "pairs", "verdict"]


def _seeds_text(c: dict[str, Any]) -> str:
    na, nb = c["n"]
    if c["test"] == "Welch":
        return f"none (of {na} and {nb}): Welch"
    return f"{c['pairs']}" + ("" if c["pairs"] == na == nb else f" (of {na} and {nb})")


def _ci_text(c: dict[str, Any]) -> str:
    if c["ci_low"] is None:
        return "- (one pair)" if c["test"] == "paired t" else "- (n < 2)"
    return f"[{number(c['ci_low'])}, {number(c['ci_high'])}]"


def markdown(rows: list[dict[str, Any]], baseline: str, name: Any = None) -> list[str]:
    """The comparison table under the report's table; a line saying why where there is none."""
    compared = [r for r in rows if r.get("vs_baseline")]
    if not compared:
        if any(r["init"] == baseline for r in rows) or not rows:
            return []
        return ["", f"No {baseline} rows to compare with (`--baseline LABEL`, in the API `?baseline=LABEL`, "
                "picks another init)."]
    lines = ["", f"Difference from {baseline} (init − {baseline}, 95% CI: paired t on the seeds both share, "
             "Welch only where they share none):", "",
             "| task | init | metric | difference | 95% CI | seeds paired | verdict |", "|---" * 7 + "|"]
    for r in compared:
        c = r["vs_baseline"]
        better = "higher" if c["higher_is_better"] else "lower"
        init = name(r) if name else r["init"]
        budget = " (at this budget: still improving)" if c.get("still_improving") else ""
        lines.append(f"| {r['task']} | {init} | {r['metric']} ({better} is better) | {number(c['diff'])} | "
                     f"{_ci_text(c)} | {_seeds_text(c)} | {c['verdict']}{budget} |")
    return lines
