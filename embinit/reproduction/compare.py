"""Comparisons of two groups of values (Welch intervals, verdicts on the paper's claims) and the number
formatting of the reproduction (the report's, with "—" for what is missing)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from embinit.formatting import interval, number


def welch(a: list[float], b: list[float]) -> dict[str, Any]:
    """mean(a) - mean(b) with a Welch 95% half-width (None when either side has n < 2)."""
    if not a or not b:
        return {"diff": None, "ci95": None, "n": (len(a), len(b))}
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return {"diff": diff, "ci95": None, "n": (len(a), len(b))}
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return {"diff": diff, "ci95": 0.0, "n": (len(a), len(b))}
    dof = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0))
    from scipy.stats import t
    return {"diff": diff, "ci95": float(t.ppf(0.975, dof)) * se, "n": (len(a), len(b))}


def verdict(cmp: dict[str, Any], expected: int, tolerate: bool = False) -> str:
    """expected +1: the paper says a > b; -1: a < b. tolerate: the paper's claim is 'a >= b' ("on par or
    better"), which only a significant opposite difference contradicts."""
    d, ci = cmp["diff"], cmp["ci95"]
    if d is None:
        return "not measured"
    same = d * expected > 0
    if ci is None:
        return (("same direction" if same else "opposite direction")
                + f" (n = {cmp['n'][0]} vs {cmp['n'][1]}: no interval)")
    lo, hi = sorted((expected * (d - ci), expected * (d + ci)))   # the interval on the paper's side
    if lo > 0:
        return "reproduces"
    if hi < 0:
        return "contradicts"
    if tolerate:
        return "reproduces (on par: the interval includes 0)"
    return "same direction, not significant" if same else "opposite direction, not significant"


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
    ci = "no interval" if cmp["ci95"] is None else \
        f"95% CI [{fmt(cmp['diff'] - cmp['ci95'], digits)}, {fmt(cmp['diff'] + cmp['ci95'], digits)}]"
    return f"{name_a} − {name_b} = {fmt(cmp['diff'], digits)} ({ci}; n = {cmp['n'][0]} vs {cmp['n'][1]})"


def duration(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min"
