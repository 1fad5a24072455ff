"""Two inits compared on one metric: mean(a) − mean(b) with a 95% interval, and a verdict.

Seeds are paired across inits (one seed: one data order, one draw of the non-embedding weights and of
the dropout masks), so the comparison is the paired t interval on the per-seed differences of the seeds
both sides have (`pairs` says how many); a seed missing on one side only drops that seed. Welch's
interval on the two means is used only when the sides share no seed. Differences (or, for Welch, both
sides' values) without any spread give no interval, not a zero-width one: identical per-seed differences
are what a quantized metric (dev accuracy moves in steps of 1/872 on SST-2) or a saturated task gives
from two or three seeds, and a zero-width interval would read as certainty. Each result's `reason`
says why it has no interval (None when it has one). `divergence_rule` is the one rule by which seeds
lost to divergence qualify a verdict (the report's comparisons, the reproduction's findings). Each
interval's test has its two-sided p-value, and `holm` adjusts a family of them for multiplicity. Below both
`embinit.report.table` and `embinit.reproduction`; imports neither MLflow nor torch (scipy.special for the t quantile).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

# How a metric's name (its last part, `oov/test_loss` -> `test_loss`) ends when a lower value is the
# better one; time and epoch counts are not scores either way, but smaller is the cheaper.
LOWER_IS_BETTER = ("loss", "ppl")
LOWER_IS_BETTER_NAMES = ("time_s", "seconds", "epoch")   # wall_time_s, best_epoch, val/acc_epoch
# A spread this small next to the values' size is float rounding of equal values (0.83 - 0.8288 and
# 0.82 - 0.8188 differ in the 17th digit), not variation between seeds.
ROUNDING = 1e-9
VERDICTS = ("better", "worse", "inconclusive")


def t_quantile(df: float) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (real df: Welch's too). The
    function `scipy.stats.t.ppf` calls, imported alone: scipy.stats costs ~1 s at every report."""
    from scipy.special import stdtrit
    return float(stdtrit(df, 0.975))


def two_sided_p(t: float, df: float) -> float:
    """The two-sided p-value of Student's t statistic `t` with `df` degrees of freedom (`scipy.special.stdtr`,
    what `scipy.stats.t.sf` computes): p < 0.05 exactly where the 95% interval excludes 0."""
    from scipy.special import stdtr
    return float(min(1.0, 2.0 * stdtr(df, -abs(t))))


def no_spread(values: list[float], scale: list[float]) -> bool:
    """Whether `values` are all equal up to float rounding at the size of `scale`'s values."""
    return max(values) - min(values) <= ROUNDING * max(abs(v) for v in scale)


def welch(a: list[float], b: list[float]) -> dict[str, Any]:
    """mean(a) - mean(b) with a Welch 95% half-width and its two-sided `p` (both None when either side has
    n < 2, or neither side any spread: `reason` says which); non-finite values are left out."""
    a, b = [v for v in a if math.isfinite(v)], [v for v in b if math.isfinite(v)]
    n = (len(a), len(b))
    if not a or not b:
        return {"diff": None, "ci95": None, "p": None, "n": n, "reason": "no values"}
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return {"diff": diff, "ci95": None, "p": None, "n": n, "reason": "n < 2"}
    if no_spread(a, a) and no_spread(b, b):
        return {"diff": diff, "ci95": None, "p": None, "n": n,
                "reason": "zero variance: each side's values are identical"}
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0))
    return {"diff": diff, "ci95": t_quantile(dof) * se, "p": two_sided_p(diff / se, dof), "n": n, "reason": None}


def paired(a: dict[Any, float], b: dict[Any, float]) -> dict[str, Any]:
    """a − b for values keyed by seed: the paired t interval on the differences of the shared seeds
    (`pairs` of them; no interval with one pair, nor when the differences are all the same), Welch's on
    all values when no seed is shared. `test` names the one used; `p` is its two-sided p-value; `n` is
    each side's number of seeds; `reason` why there is no interval (then no `p` either). Non-finite values
    are left out."""
    a, b = ({k: v for k, v in d.items() if math.isfinite(v)} for d in (a, b))
    shared = sorted(set(a) & set(b), key=str)
    n = (len(a), len(b))
    if not shared:
        return {**welch(list(a.values()), list(b.values())), "pairs": 0, "test": "Welch"}
    diffs = [a[k] - b[k] for k in shared]
    d = statistics.fmean(diffs)
    ci, p, reason = None, None, None
    if len(diffs) < 2:
        reason = "one pair"
    elif no_spread(diffs, [a[k] for k in shared] + [b[k] for k in shared]):
        reason = f"zero variance: the {len(diffs)} paired differences are identical"
    else:
        se = statistics.stdev(diffs) / math.sqrt(len(diffs))
        ci, p = t_quantile(len(diffs) - 1) * se, two_sided_p(d / se, len(diffs) - 1)
    return {"diff": d, "ci95": ci, "p": p, "n": n, "pairs": len(shared), "test": "paired t", "reason": reason}


def holm(ps: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of the p-values of one family of tests, in their order: the k-th
    smallest of m is multiplied by m − k + 1, made non-decreasing, capped at 1. Rejecting where the
    adjusted p is below 0.05 keeps the chance of any false verdict in the family at 5% (Holm 1979),
    whatever the tests' dependence. None (a comparison without a test) stays None and is not counted."""
    tested = sorted((p, i) for i, p in enumerate(ps) if p is not None)
    out: list[float | None] = [None] * len(ps)
    running, m = 0.0, len(tested)
    for k, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - k) * p))
        out[i] = running
    return out


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of `metric` is the better one (BLEU, accuracy), not (a name ending in loss
    or ppl: `val/loss`, `oov/test_loss`; a time or epoch count: `wall_time_s`, `best_epoch`)."""
    base = metric.rsplit("/", 1)[-1]
    for suffix in ("_matched", "_mismatched"):
        base = base.removesuffix(suffix)
    return not (base.endswith(LOWER_IS_BETTER) or base.endswith(LOWER_IS_BETTER_NAMES))


def direction(cmp: dict[str, Any], metric: str) -> str:
    """better | worse | inconclusive: a's value against b's on `metric`, from the 95% interval of a − b
    (inconclusive when it includes 0 or there is none)."""
    d, ci = cmp.get("diff"), cmp.get("ci95")
    if d is None or ci is None or not math.isfinite(d) or not math.isfinite(ci):
        return "inconclusive"
    low, high = d - ci, d + ci
    if low <= 0 <= high:
        return "inconclusive"
    return "better" if (low > 0) == higher_is_better(metric) else "worse"


def divergence_rule(verdict: str, favours: str, sides: tuple[str, str], lost: tuple[int, int],
                    seeds: tuple[int, int]) -> dict[str, Any]:
    """How seeds lost to divergence qualify a verdict on a − b, the rule the report and the reproduction
    share. Diverged seeds have no value, so the verdict is the survivors'; a side that lost seeds is never
    the favoured one on its survivors alone (a learning rate that kills 3 seeds of 5 does not win on the
    other 2), while a verdict against it stands (its lost seeds would only make it worse).

    `verdict`: what the survivors' comparison says; `favours`: the `direction` of that comparison (better:
    it favours a, worse: b, inconclusive: neither); `sides`: the names of a and b; `lost`: the seeds each
    lost to divergence; `seeds`: each side's seeds, diverged ones included. Returns `verdict`
    (`inconclusive` where the favoured side lost seeds), `diverged` (`lost`), `survivor_verdict`
    (`verdict` as given) and `note` (None when no seed diverged; else which side lost how many of its
    seeds, and the survivors' verdict where it was set aside)."""
    out = {"verdict": verdict, "diverged": list(lost), "survivor_verdict": verdict, "note": None}
    if not any(lost):
        return out
    said = [f"{name} diverged on {k} of {n} seeds" for name, k, n in zip(sides, lost, seeds) if k]
    if {"better": lost[0], "worse": lost[1]}.get(favours):
        out["verdict"] = "inconclusive"
        said.append(f"on the survivors: {verdict}")
    out["note"] = "; ".join(said)
    return out


DIVERGENCE_RULE = ("Diverged seeds have no value: means and intervals are the survivors'. A side that lost seeds "
                   "to divergence is not called better on its survivors alone: that verdict reads inconclusive, "
                   "with the survivors' verdict and the seeds lost beside it.")
