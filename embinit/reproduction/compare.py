"""Verdicts on the paper's claims from comparisons of two inits (`embinit.comparison`: paired t on the
shared seeds, Welch when none is shared) and the number formatting of the reproduction (the report's,
with "—" for what is missing)."""

from __future__ import annotations

from typing import Any

# the statistics live below the report and the reproduction
from embinit.comparison import direction, paired, welch
from embinit.report.baseline import p_text
from embinit.report.formatting import interval, number

__all__ = ["ci_text", "compare_text", "duration", "favours", "fmt", "mean_std", "p_holm_text", "paired", "verdict",
           "welch"]


def p_holm_text(c: dict[str, Any]) -> str:
    """`, p = 0.012 (Holm 0.036, m = 3)` for a comparison `report.baseline.adjust` adjusted, "" without a test."""
    if c.get("p") is None:
        return ""
    return f", p = {p_text(c['p'])} (Holm {p_text(c['p_holm'])}, m = {c['holm_m']})"


def verdict(cmp: dict[str, Any], expected: int, tolerate: bool = False, effect: float | None = None) -> str:
    """expected +1: the paper says a > b; -1: a < b. tolerate: the paper's claim is 'a >= b' ("on par or
    better"). effect: the size of the difference the paper reports (|a − b| in its tables), or None.

    "reproduces": the interval lies on the paper's side of 0; "contradicts": on the other side. An interval
    across 0 is "inconclusive" when it is wider than the paper's effect, i.e. its half-width `ci95` exceeds
    |effect| (or the paper gives none): centred on 0 it would hold the paper's effect, so it could not have
    told that effect from 0. An interval across 0 whose half-width is at most |effect| is "on par" for a
    tolerant claim, and for a directional one "does not reproduce" where the paper's effect lies outside it,
    "inconclusive" where it lies inside. Without an interval (one pair, or identical differences) the
    verdict is the sign of a − b against the paper's and why: "same direction", "opposite direction", or
    "no difference" where a − b is exactly 0 (neither side of 0, so neither the paper's nor the other);
    an "inconclusive" names the sign the same way (`_sign_text`)."""
    d, ci = cmp["diff"], cmp["ci95"]
    if d is None:
        return "not measured"
    if ci is None:
        why = cmp.get("reason") if str(cmp.get("reason")).startswith("zero variance") else "no interval"
        return f"{_sign_text(d, expected)} (n = {cmp['n'][0]} vs {cmp['n'][1]}: {why})"
    lo, hi = sorted((expected * (d - ci), expected * (d + ci)))   # the interval on the paper's side
    if lo > 0:
        return "reproduces"
    if hi < 0:
        return "contradicts"
    direction = _sign_text(d, expected)
    if effect is None or ci > abs(effect):
        return f"inconclusive ({direction}; the interval is wider than the paper's effect)" if effect is not None \
            else f"inconclusive ({direction}; the paper gives no effect size)"
    if tolerate:
        return "reproduces (on par: the interval includes 0 and is narrower than the paper's effect)"
    return "does not reproduce (the interval includes 0 and excludes the paper's effect)" \
        if hi < abs(effect) else f"inconclusive ({direction})"


def _sign_text(d: float, expected: int) -> str:
    """a − b = `d` against the paper's sign `expected`: "same direction", "opposite direction", or "no
    difference" for a d of exactly 0 (on neither side of 0)."""
    return "no difference" if d == 0 else "same direction" if d * expected > 0 else "opposite direction"


def favours(cmp: dict[str, Any], metric: str, said: str, expected: int) -> str:
    """better | worse | inconclusive: the side a `verdict` (`said`) speaks for, as
    `comparison.divergence_rule` takes it (better: a, worse: b). An interval that excludes 0 speaks for
    the side it lies on (`comparison.direction`). One that includes 0 speaks for a side too when the verdict
    reads it: "on par" grants the claim's side (a when `expected` > 0, the task metric's sign of the
    claim) that it is no worse, and "does not reproduce" grants the other side that the claim's side is not
    better; were the survivors' side to have lost seeds to divergence, either reading would rest on them."""
    if said.startswith("reproduces (on par"):
        return "better" if expected > 0 else "worse"
    if said.startswith("does not reproduce"):
        return "worse" if expected > 0 else "better"
    return direction(cmp, metric)


def fmt(v: float | None, digits: int = 2) -> str:
    return number(v, digits, missing="—")


def mean_std(s: dict[str, Any], digits: int = 2) -> str:
    if not s or s.get("mean") is None:
        return "—"
    return f"{fmt(s['mean'], digits)} ({fmt(s['std'], digits)})"


def ci_text(s: dict[str, Any], digits: int = 2) -> str:
    return interval(s, digits, missing="—")


def compare_text(name_a: str, name_b: str, cmp: dict[str, Any], digits: int = 2) -> str:
    if cmp["diff"] is None:
        return f"{name_a} − {name_b}: not measured"
    ci = f"no interval: {cmp['reason']}" if cmp["ci95"] is None and cmp.get("reason") else "no interval" \
        if cmp["ci95"] is None else \
        f"95% CI [{fmt(cmp['diff'] - cmp['ci95'], digits)}, {fmt(cmp['diff'] + cmp['ci95'], digits)}]"
    test = f"{cmp['test']}, " if cmp.get("test") else ""
    pairs = f", {cmp['pairs']} shared" if cmp.get("pairs") and cmp["pairs"] < max(cmp["n"]) else ""
    return f"{name_a} − {name_b} = {fmt(cmp['diff'], digits)} ({test}{ci}; n = {cmp['n'][0]} vs {cmp['n'][1]}{pairs})"


def duration(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min"
