"""A model's parameter count before its vocabulary exists (`embinit run --dry-run`): the model is built
with tiny tables, and its count is split into the part the vocabulary does not change (the body) and
what each vocabulary row adds (its embedding row, and for a decoder its output row)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from embinit.models import ModelConfig, build_model
from embinit.task_registry import kind_entry


@dataclass(frozen=True)
class ModelSize:
    body: int                      # parameters that do not depend on the vocabulary
    per_row: dict[str, int]        # parameters one more row of each table adds

    def total(self, rows: dict[str, int]) -> int:
        return self.body + sum(self.per_row[side] * rows.get(side, 0) for side in self.per_row)

    def text(self) -> str:
        rows = ", ".join(f"{n} per {side}-vocabulary row" for side, n in self.per_row.items())
        return f"{self.body:,} parameters + {rows}"


def _count(kind: str, cfg: ModelConfig, rows: dict[str, int], num_labels: int) -> int:
    tables = {side: torch.zeros(n, cfg.d_model) for side, n in rows.items()}
    model = build_model(kind, tables, cfg, num_labels=num_labels)
    return sum(p.numel() for p in model.parameters())


def model_size(kind: str, cfg: ModelConfig, num_labels: int = 2) -> ModelSize:
    """The parameter count of a `kind` model of `cfg`'s shape as body + rows (built on the CPU, once)."""
    sides = kind_entry(kind).sides
    base = {side: 4 for side in sides}
    at_base = _count(kind, cfg, base, num_labels)
    per_row = {side: _count(kind, cfg, {**base, side: 5}, num_labels) - at_base for side in sides}
    body = at_base - sum(4 * n for n in per_row.values())
    return ModelSize(body, per_row)
