"""Numbers as the report and the reproduction print them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


LARGE = 1e6   # from here on a number prints with 3 significant digits and an exponent


def number(v: float | None, digits: int = 2, missing: str = "-") -> str:
    """`v` with `digits` decimals, or from `LARGE` on with 3 significant digits (`1.76e+39`: an exploding
    perplexity's 40 digits before the point fill a table's cell and say nothing more); `missing` for None
    and for a non-finite float."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return missing
    if abs(v) >= LARGE:
        return f"{v:.3g}"
    return f"{v:.{digits}f}"


def interval(s: dict[str, Any], digits: int = 2, missing: str = "-") -> str:
    """The 95% interval of a `summarize` dict: `[ci_low, ci_high]` (clipped to the metric's range) where
    the dict has them, else `[mean - ci95, mean + ci95]`; `missing` without one."""
    if not s or s.get("ci95") is None:
        return missing
    low = s["ci_low"] if s.get("ci_low") is not None else s["mean"] - s["ci95"]
    high = s["ci_high"] if s.get("ci_high") is not None else s["mean"] + s["ci95"]
    return f"[{number(low, digits, missing)}, {number(high, digits, missing)}]"


def is_fraction(metric: str) -> bool:
    """Whether `metric` is logged as a fraction in [0, 1] (accuracies)."""
    from embinit.config import metric_range
    return metric_range(metric) == (0.0, 1.0)


MAX_DIGITS = 6


def metric_digits(metric: str, means: Iterable[float | None] = ()) -> int:
    """Decimals the report prints `metric` with: 4 for a fraction (an accuracy gain of 0.45 points is
    0.0045, which 2 decimals print as 0.00), else 2; more where a mean needs them for two significant
    digits (BLEU 0.0183 and 0.0074 after a short run print as 0.0183 and 0.0074, not both as 0.01),
    at most MAX_DIGITS."""
    return decimals(means, 4 if is_fraction(metric) else 2)


def decimals(values: Iterable[float | None], base: int = 2) -> int:
    """At least `base` decimals, more (up to MAX_DIGITS) where a value needs them for two significant
    digits; None, zero and non-finite values ask for none."""
    need = [1 - math.floor(math.log10(abs(v))) for v in values if v is not None and math.isfinite(v) and v != 0]
    return max(base, min(MAX_DIGITS, max(need, default=base)))


def digits_by_metric(rows: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """One number of decimals per (task, metric) of a report's rows (from their `mean`s): the inits of one
    task compare at one precision; another task's scale does not change it."""
    means: dict[tuple[str, str], list] = {}
    for r in rows:
        means.setdefault((r["task"], r["metric"]), []).append(r.get("mean"))
    return {k: metric_digits(k[1], v) for k, v in means.items()}
