"""Table 1 from MLflow alone (`table`: `build_report`, `Report`): which trials make a row (`rows`), the
notes under the table (`notes`), each row against the baseline init (`baseline`), the planned trials that
never finished (`completeness`), Figure 1 and the rows' order (`plots`), the LaTeX form (`latex`), and
numbers as printed (`formatting`), which the reproduction shares. Two inits are compared by
`embinit.comparison`, which the task registry also reads. Reads MLflow through embinit.tracking; nothing
of the sweep."""

from __future__ import annotations

import importlib
from typing import Any

# The names a caller wants, loaded on first use: importing one module of the report (the reproduction's
# `formatting`) does not read MLflow's client in.
_LAZY = {"build_report": "table", "Report": "table", "summarize": "rows"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'embinit.report' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"embinit.report.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


__all__ = ["Report", "build_report", "summarize"]
