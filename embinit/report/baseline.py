"""The report's answer to "which init won, by how much": each row's difference from the baseline init's
row of the same task, axes and metric (Xavier by default), with a 95% interval and a verdict.

The interval is `embinit.comparison.paired`: paired t on the seeds both rows share (`pairs`), Welch only
when they share none. The verdict knows the metric's direction: a lower loss or perplexity is better.

Multiplicity: comparing m inits with one baseline gives m chances of a false "better" or "worse" at 95%
each. The family is every comparison with the baseline on one task and metric, over all its axes
settings (the LaTeX table's column: an ablation's cells are read together), within one configuration
(`holm_family`: where an experiment holds several, e.g. a spec run again with other epochs, the fields
that tell them apart; rows of different configurations are separate studies); each comparison carries its
test's two-sided `p`, Holm's adjusted `p_holm` over its family of
`holm_m` tests, and `holds_after_holm`: whether a better/worse verdict survives the adjustment (None
for an inconclusive one). The verdict itself stays the 95% interval's, so it always agrees with the
interval printed beside it; one that does not hold after Holm is marked so wherever it is shown.

Diverged seeds have no value, so the interval is the survivors'. A side that lost seeds to divergence is
never called the better one on its survivors alone (a learning rate that kills 3 seeds of 5 does not win
on the other 2): such a verdict reads `inconclusive`, `survivor_verdict` keeps what the survivors said
and `diverged` says how many seeds each side lost. A verdict against the diverging side stands: its lost
seeds would only make it worse.
"""

from __future__ import annotations

import json
from typing import Any

from embinit.config import within
from embinit.comparison import DIVERGENCE_RULE, direction, divergence_rule, higher_is_better, holm, paired
from embinit.errors import EmbinitError, did_you_mean
from embinit.report.formatting import digits_by_metric, number

DEFAULT_BASELINE = "Xavier"


class UnknownBaseline(EmbinitError):
    """The baseline named is not an init label of the experiment (the API answers it as a problem of its
    `baseline` query parameter)."""


def check_baseline(baseline: str, labels: set[str]) -> None:
    """An error naming `baseline` and the init labels the experiment has, when it is not one of them."""
    if labels and baseline not in labels:
        raise UnknownBaseline(f"baseline {baseline!r} is not an init of this experiment; choose from "
                           f"{sorted(labels)}{did_you_mean(baseline, labels)}")


def _slot(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["task"], json.dumps(row["axes"], sort_keys=True), row["metric"]


def _candidates(row: dict[str, Any], base: dict[tuple, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The baseline's rows for `row`: those of its task, metric and axes, else those whose axes are a part
    of its axes (the baseline was planned without an axis that does nothing for it)."""
    exact = base.get(_slot(row))
    if exact:
        return exact
    part = [b for (task, _, metric), rows in base.items() if (task, metric) == (row["task"], row["metric"])
            for b in rows if within(b["axes"], row["axes"])]
    most = max((len(b["axes"]) for b in part), default=0)
    return [b for b in part if len(b["axes"]) == most]   # the closest: those sharing the most axes


# Config fields that make an init what it is: rows compared with the baseline may differ in these only.
INIT_FIELDS = ("init", "src_init", "pretrained", "src_pretrained", "oov", "emb_seed", "init_from", "tokenizer")


def basis(setting: dict[str, Any]) -> dict[str, Any]:
    """What a row must share with its baseline row: its trials' setting (the report's `_setting`:
    everything but seed and search point) without the init's own fields."""
    return {k: v for k, v in setting.items() if k not in INIT_FIELDS}


def _differ(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """The fields two bases set differently; a field only one of them has (searched on the other side:
    each row's best point stands for it) does not count."""
    if a is None or b is None:
        return [] if a is b else ["(no trials)"]
    return sorted(k for k in a.keys() & b.keys() if a[k] != b[k])


def _baseline_row(row: dict[str, Any], candidates: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """(the baseline row for `row`, None) -- one trained like it (same `basis`), with the same setting
    if several -- or (None, why not) when the baseline's rows were all trained otherwise."""
    alike = [c for c in candidates if not _differ(c.get("_basis"), row.get("_basis"))]
    same = [c for c in alike if c["setting"] == row["setting"]]
    if same or len(alike) == 1:
        return (same or alike)[0], None
    trained = [c["_basis"] for c in candidates if c.get("_basis") is not None]
    if alike or not trained or row.get("_basis") is None:
        return None, None   # (several alike: no one baseline row; none trained: nothing to compare with)
    other = trained[0]
    text = ", ".join(f"{k}={row['_basis'][k]} here, {other[k]} there" for k in _differ(other, row["_basis"]))
    return None, f"the baseline was trained otherwise ({text})"


# What became of a row's trials, as `no_result` names them.
_OUTCOMES = {"diverged": "diverged", "non_finite": "non-finite", "no_value": "logged no value", "failed": "failed",
             "running": "running", "never_started": "never started"}


def no_result(baseline: str, candidates: list[dict[str, Any]]) -> str | None:
    """Why a row with results has no comparison when the baseline's rows for it (`candidates`) have no
    finished seed: a cancelled sweep that never started them, seeds that all diverged or failed (None when
    the baseline has no row here, or one with seeds)."""
    if not candidates or any(c["seeds"] for c in candidates):
        return None
    counts = {word: sum(c.get(k) or 0 for c in candidates) for k, word in _OUTCOMES.items()}
    said = ", ".join(f"{n} {word}" for word, n in counts.items() if n)
    return f"{baseline} has no finished seed here" + (f" ({said})" if said else "")


def no_row(baseline: str, row: dict[str, Any], base: dict[tuple, list[dict[str, Any]]]) -> str | None:
    """Why `row` has no comparison when the baseline has rows in the experiment but none for its task and
    metric, or none at its axes (two specs with other inits logging to one experiment); None when the
    baseline has no row at all (the report then says so once: "No Xavier rows to compare with")."""
    if not base:
        return None
    if any((task, metric) == (row["task"], row["metric"]) for task, _, metric in base):
        return f"{baseline} has no row at these axes"
    return f"{baseline} has no row for this task"


def _baseline_for(row: dict[str, Any], base: dict[tuple, list[dict[str, Any]]], baseline: str) -> tuple:
    """(the baseline row `row` is compared with, or None; why it has none to compare with, or None): the
    baseline's own rows have neither; a row with seeds whose baseline row has no finished seed, or has no
    row for its task or axes, is told why (`no_result`, `no_row`)."""
    if row["init"] == baseline:
        return None, None
    candidates = _candidates(row, base)
    b, why = _baseline_row(row, candidates)
    if why or not row["seeds"] or (b is not None and b["seeds"]):
        return b, why
    return b, (no_result(baseline, [b] if b is not None else candidates)
               or (None if candidates else no_row(baseline, row, base)))


def compare_rows(rows: list[dict[str, Any]], baseline: str) -> None:
    """Set each row's `vs_baseline` (None for the baseline's own rows and where it has no row trained
    like this one, or one without a finished seed: then `no_baseline` says why). Drops the rows' `_basis`."""
    base: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["init"] == baseline:
            base.setdefault(_slot(r), []).append(r)
    for r in rows:
        b, why = _baseline_for(r, base, baseline)
        r["vs_baseline"] = None if b is None or not r["seeds"] or not b["seeds"] else {
            **with_divergence(comparison(r["seeds"], b["seeds"], r["metric"], baseline), r, b),
            "still_improving": bool(r.get("still_improving") or b.get("still_improving")),
            "one_epoch": bool(r.get("one_epoch") or b.get("one_epoch")),
            "holm_family": configuration(r, b)}
        if why:
            r["no_baseline"] = why
    for r in rows:
        r.pop("_basis", None)
    families: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:   # one family per task, metric and configuration, every axes setting in it
        c = r.get("vs_baseline")
        if c:
            families.setdefault((r["task"], r["metric"], json.dumps(c["holm_family"], sort_keys=True, default=str)),
                                []).append(c)
    for family in families.values():
        adjust(family)


def configuration(row: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Which of the experiment's configurations a comparison belongs to: the fields (not the init's own)
    that tell the configurations of the row's or its baseline row's label apart (their `setting`; {}
    with one configuration). Two configurations in one experiment (a spec run again with more epochs)
    are two studies the report shows as separate rows: Holm's family is per configuration, so one's
    comparisons do not make the other's stricter."""
    return {**basis(base.get("setting") or {}), **basis(row.get("setting") or {})}


SIGNIFICANCE = 0.05   # the level the 95% intervals and Holm's adjusted p-values are read at


def adjust(family: list[dict[str, Any]], decisive_verdicts: tuple[str, ...] = ("better", "worse")) -> None:
    """Set each comparison's `p_holm`, `holm_m` (the family's tests) and `holds_after_holm` (a decisive
    verdict, better or worse, whose adjusted p is below 0.05; None for an inconclusive verdict or one
    without a p). The reproduction's findings pass their own decisive verdicts (reproduces, contradicts)."""
    adjusted = holm([c.get("p") for c in family])
    m = sum(p is not None for p in adjusted)
    for c, p in zip(family, adjusted):
        decisive = c["verdict"] in decisive_verdicts and p is not None
        c.update(p_holm=p, holm_m=m, holds_after_holm=(p < SIGNIFICANCE) if decisive else None)


def comparison(a: dict[str, float], b: dict[str, float], metric: str, baseline: str) -> dict[str, Any]:
    """a − b for {seed: value} dicts on `metric`: difference, 95% interval, test, its two-sided `p`, pairs,
    verdict and the `reason` there is no interval (one pair, n < 2, zero variance), if none."""
    c = paired(a, b)
    low = high = None
    if c["diff"] is not None and c["ci95"] is not None:
        low, high = c["diff"] - c["ci95"], c["diff"] + c["ci95"]
    return {"baseline": baseline, "diff": c["diff"], "ci95": c["ci95"], "ci_low": low, "ci_high": high,
            "test": c["test"], "p": c["p"], "pairs": c["pairs"], "n": list(c["n"]), "reason": c.get("reason"),
            "higher_is_better": higher_is_better(metric), "verdict": direction(c, metric)}


def with_divergence(c: dict[str, Any], row: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """`c` with `diverged` ([row's, baseline's] seeds lost to divergence at the compared point) and,
    where the verdict favours a side that lost seeds, the verdict made `inconclusive` (`survivor_verdict`:
    the survivors' verdict); `note` says so in words (`comparison.divergence_rule`)."""
    lost = (row.get("diverged") or 0, base.get("diverged") or 0)
    seeds = tuple(k + r["n"] + (r.get("non_finite") or 0) + (r.get("no_value") or 0) for k, r in zip(lost, (row, base)))
    return {**c, **divergence_rule(c["verdict"], c["verdict"], (row["init"], c["baseline"]), lost, seeds)}


def csv_columns(row: dict[str, Any], baseline: str = DEFAULT_BASELINE) -> dict[str, Any]:
    """The comparison as flat CSV columns (empty for a row without one, but for `verdict_note`, which then
    says why there is none, as the markdown's "Rows without a comparison" does)."""
    c = row.get("vs_baseline") or {}
    if not c and row.get("no_baseline"):
        return {"verdict_note": f"not compared with {baseline}: {row['no_baseline']}"}
    return {"baseline": c.get("baseline", ""), "diff": c.get("diff"), "diff_ci_low": c.get("ci_low"),
            "diff_ci_high": c.get("ci_high"), "test": c.get("test", ""), "pairs": c.get("pairs"),
            "p": c.get("p"), "p_holm": c.get("p_holm"), "holm_m": c.get("holm_m"),
            "verdict": c.get("verdict", ""), "holds_after_holm": c.get("holds_after_holm"),
            "baseline_diverged": (c.get("diverged") or [None, None])[1],
            "verdict_note": "; ".join(x for x in (c.get("note"), c.get("reason"), budget_text(c)) if x)}


def budget_text(c: dict[str, Any]) -> str:
    """What qualifies a comparison's verdict by the training budget: either row still improving at its last
    epoch, or trained for one epoch ('' otherwise); the markdown's verdict cell and the CSV's
    `verdict_note` say it alike."""
    return ("at this budget: still improving" if c.get("still_improving")
            else "after one epoch" if c.get("one_epoch") else "")


CSV_COLUMNS = ["baseline", "diff", "diff_ci_low", "diff_ci_high", "test", "pairs", "p", "p_holm", "holm_m", "verdict",
               "holds_after_holm", "baseline_diverged", "verdict_note"]


def p_text(p: float | None) -> str:
    """A p-value as tables print it: three significant digits (0.0496 and 0.0504 stay apart), more where
    three would round it across 0.05 (0.04996, not "0.05", which would read as not significant while
    the verdict counts it as significant), `<0.001` below that, `-` without a test."""
    if p is None:
        return "-"
    if p < 0.001:
        return "<0.001"
    for digits in range(3, 18):
        text = f"{p:.{digits}g}"
        if (float(text) < SIGNIFICANCE) == (p < SIGNIFICANCE):
            return text
    return repr(p)


def _p_cell(c: dict[str, Any]) -> str:
    return "-" if c["p"] is None else f"{p_text(c['p'])} ({p_text(c['p_holm'])})"


def holm_mark(c: dict[str, Any]) -> str:
    """What a verdict cell adds when the verdict does not hold after Holm's adjustment ('' otherwise)."""
    return f" (not after Holm, m={c['holm_m']})" if c.get("holds_after_holm") is False else ""


HOLM_RULE = ("p: the test's two-sided p-value; in brackets Holm's adjustment for the m comparisons with {baseline} "
             "on the same task and metric (every axes setting). A verdict marked \"not after Holm\" has a 95% "
             "interval that excludes 0, but with m comparisons at 95% some such verdicts are expected by chance: "
             "treat it as tentative.")


def family_text(compared: list[dict[str, Any]]) -> str:
    """What the Holm rule adds where the comparisons come from several configurations: which fields make
    them separate families ('' with one configuration)."""
    families = {json.dumps(r["vs_baseline"].get("holm_family") or {}, sort_keys=True, default=str) for r in compared}
    if len(families) < 2:
        return ""
    fields = sorted({k for f in families for k in json.loads(f)})
    return (f" The rows come from {len(families)} configurations (differing in {', '.join(fields)}): each "
            "configuration's comparisons are their own family, m counts that configuration's only.")


def _seeds_text(c: dict[str, Any]) -> str:
    na, nb = c["n"]
    if c["test"] == "Welch":
        return f"none (of {na} and {nb}): Welch"
    return f"{c['pairs']}" + ("" if c["pairs"] == na == nb else f" (of {na} and {nb})")


def _ci_text(c: dict[str, Any], digits: int = 2) -> str:
    if c["ci_low"] is None:
        return f"- ({c.get('reason') or ('one pair' if c['test'] == 'paired t' else 'n < 2')})"
    return f"[{number(c['ci_low'], digits)}, {number(c['ci_high'], digits)}]"


def markdown(rows: list[dict[str, Any]], baseline: str, name: Any = None) -> list[str]:
    """The comparison table under the report's table; a line saying why where there is none."""
    compared = [r for r in rows if r.get("vs_baseline")]
    apart = [f"- {r['task']} {name(r) if name else r['init']} ({r['metric']}): not compared with {baseline}: "
             f"{r['no_baseline']}" for r in rows if r.get("no_baseline")]
    if apart:
        apart = ["", "Rows without a comparison:", *apart]
    if not compared and apart:
        return apart
    if not compared:
        if any(r["init"] == baseline for r in rows) or not rows:
            return []
        return ["", f"No {baseline} rows to compare with (`--baseline LABEL`, in the API `?baseline=LABEL`, "
                "picks another init)."]
    lines = ["", f"Difference from {baseline} (init − {baseline}, 95% CI: paired t on the seeds both share, "
             "Welch only where they share none):", "",
             "| task | init | metric | difference | 95% CI | seeds paired | p (Holm) | verdict |", "|---" * 8 + "|"]
    digits = digits_by_metric(rows)    # as the report's table prints the means
    for r in compared:
        c = r["vs_baseline"]
        better = "higher" if c["higher_is_better"] else "lower"
        init = name(r) if name else r["init"]
        budget = f" ({budget_text(c)})" if budget_text(c) else ""
        d = digits[r["task"], r["metric"]]
        note = f" ({c['note']})" if c.get("note") else ""
        lines.append(f"| {r['task']} | {init} | {r['metric']} ({better} is better) | {number(c['diff'], d)} | "
                     f"{_ci_text(c, d)} | {_seeds_text(c)} | {_p_cell(c)} | "
                     f"{c['verdict']}{holm_mark(c)}{note}{budget} |")
    lines += ["", HOLM_RULE.format(baseline=baseline) + family_text(compared)]
    if any((r["vs_baseline"].get("diverged") or [0, 0]) != [0, 0] for r in compared):
        lines += ["", DIVERGENCE_RULE]
    return lines + apart

