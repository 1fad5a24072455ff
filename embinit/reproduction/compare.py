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


def paired(a: dict[Any, float], b: dict[Any, float]) -> dict[str, Any]:
    """a − b for values keyed by seed. Seeds are paired across inits (one seed: one data order, one draw
    of the non-embedding weights and of the dropout masks), so when both sides hold the same seeds the
    comparison is the paired t interval on the per-seed differences; otherwise (unequal seed sets) Welch's
    interval on the two means. `test` names the one used."""
    if a and set(a) == set(b) and len(a) >= 2:
        diffs = [a[k] - b[k] for k in sorted(a, key=str)]
        d, sd = statistics.fmean(diffs), statistics.stdev(diffs)
        from scipy.stats import t
        ci = float(t.ppf(0.975, len(diffs) - 1)) * sd / math.sqrt(len(diffs))
        return {"diff": d, "ci95": ci, "n": (len(a), len(b)), "test": "paired t"}
    return {**welch(list(a.values()), list(b.values())), "test": "Welch"}


def verdict(cmp: dict[str, Any], expected: int, tolerate: bool = False, effect: float | None = None) -> str:
    """expected +1: the paper says a > b; -1: a < b. tolerate: the paper's claim is 'a >= b' ("on par or
    better"). effect: the size of the difference the paper reports (|a − b| in its tables), or None.

    "reproduces": the interval lies on the paper's side of 0; "contradicts": on the other side. An interval
    across 0 is "inconclusive" when it is wider than the paper's effect (or the paper gives none): it could
    not have told the paper's effect from 0. An interval across 0 and narrower than the effect is
    "on par" for a tolerant claim, and "does not reproduce" for a directional one (the paper's effect
    lies outside it)."""
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
    direction = "same direction" if same else "opposite direction"
    if effect is None or ci > abs(effect):
        return f"inconclusive ({direction}; the interval is wider than the paper's effect)" if effect is not None \
            else f"inconclusive ({direction}; the paper gives no effect size)"
    if tolerate:
        return "reproduces (on par: the interval includes 0 and is narrower than the paper's effect)"
    return "does not reproduce (the interval includes 0 and excludes the paper's effect)" \
        if hi < abs(effect) else f"inconclusive ({direction})"


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
    test = f"{cmp['test']}, " if cmp.get("test") else ""
    return f"{name_a} − {name_b} = {fmt(cmp['diff'], digits)} ({test}{ci}; n = {cmp['n'][0]} vs {cmp['n'][1]})"


def duration(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min"
