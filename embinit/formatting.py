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
    """The 95% interval `[mean - ci95, mean + ci95]` of a `summarize` dict; `missing` without one."""
    if not s or s.get("ci95") is None:
        return missing
    return f"[{number(s['mean'] - s['ci95'], digits, missing)}, {number(s['mean'] + s['ci95'], digits, missing)}]"
