"""Numbers as the report and the reproduction print them."""

from __future__ import annotations

import math
from typing import Any


def number(v: float | None, digits: int = 2, missing: str = "-") -> str:
    """`v` with `digits` decimals; `missing` for None and for a non-finite float."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return missing
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


def metric_digits(metric: str) -> int:
    """Decimals the report prints `metric` with: 4 for a fraction (an accuracy gain of 0.45 points is
    0.0045, which 2 decimals print as 0.00), else 2."""
    return 4 if is_fraction(metric) else 2
