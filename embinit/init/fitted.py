"""What a transform returns (`Fitted`) and the statistics every transform starts from; below both
`transforms` and `rescale`, which the transform registry loads by name (so neither may import the other)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from embinit.errors import EmbinitError


@dataclass
class Fitted:
    rows: torch.Tensor                 # float64 [n, D]
    covers_all: bool                   # True: the rows are the whole N x D table (match)
    vector_map: Callable[[torch.Tensor], torch.Tensor] | None


def mean_std(rows: torch.Tensor, what: str) -> tuple[float, float]:
    if rows.numel() < 2:
        raise EmbinitError(f"cannot {what}: only {rows.numel()} pretrained value(s) found")
    mean, std = rows.mean().item(), rows.std().item()
    if not std > 0:
        raise EmbinitError(f"cannot {what}: the found pretrained rows have zero spread (std={std})")
    return mean, std
