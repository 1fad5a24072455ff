"""Random inits: the registry `INITS` from a name to `fn(n_rows, dim, generator) -> float32 [n, D]`.

Every function draws only from the generator it is given, so the same generator state gives the same
table (optuna gives each sampler its own seeded RNG for the same reason).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from embinit.init.registry import RANDOM_INITS

InitFn = Callable[[int, int, torch.Generator], torch.Tensor]


def xavier_bound(n_rows: int, dim: int) -> float:
    """The paper's (and Glorot & Bengio's) bound: sqrt(6 / (N + D)) for an N x D embedding table."""
    return math.sqrt(6.0 / (n_rows + dim))


def xavier_std(n_rows: int, dim: int) -> float:
    """Standard deviation of U(-a, a) with a = xavier_bound: a / sqrt(3) = sqrt(2 / (N + D))."""
    return xavier_bound(n_rows, dim) / math.sqrt(3.0)


def xavier(n_rows: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    a = xavier_bound(n_rows, dim)
    return torch.empty(n_rows, dim).uniform_(-a, a, generator=generator)


def xavier_normal(n_rows: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    return torch.empty(n_rows, dim).normal_(0.0, xavier_std(n_rows, dim), generator=generator)


def normal(n_rows: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    # 0.02: GPT-2's embedding init std
    return torch.empty(n_rows, dim).normal_(0.0, 0.02, generator=generator)


# the functions of the registry entries (names, labels, descriptions) in embinit.init.registry
INITS: dict[str, InitFn] = {name: entry.load() for name, entry in RANDOM_INITS.items()}
