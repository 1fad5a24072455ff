"""`rescale=TARGET`: the dose of the embedding scale as a transform (issue 23, the dose-response study).

The rows are centered on their mean and scaled to a target standard deviation sigma_t:
x* = (x - mean) * sigma_t / std, with mean and std over all values of the rows (as `standardize`, eq. 1,
does; `rescale=1x` *is* `standardize`). TARGET is one of:
- `0.05`: sigma_t given absolutely;
- `4x`: a multiple of Xavier's sigma for the whole N x D table, sqrt(2 / (N + D)) (analytic, as in
  `standardize`);
- `absorption:0.5`: the sigma whose absorption ratio (`embinit.stats`: std(x * sqrt(D)) / std(PE)) is
  0.5, sigma_t = 0.5 * std(PE) / sqrt(D), with the PE table `embinit.stats` uses by default (its
  `pe_length` and `pe_base`), so the logged `emb/absorption` of the rescaled rows is the target.

It applies to any source: pretrained found rows (OOV rows are filled afterwards, in the rescaled space)
and random inits (the whole drawn table). It draws nothing from the generator.
"""

from __future__ import annotations

import inspect
import math

import torch

from embinit.init.random import xavier_std
from embinit.init.registry import parse_sigma_target
from embinit.init.fitted import Fitted, mean_std
from embinit.posenc import sinusoidal
from embinit.stats import embedding_stats

# the PE table the logged absorption ratio is computed with (embedding_stats' defaults)
_STATS_DEFAULTS = inspect.signature(embedding_stats).parameters


def pe_std(dim: int) -> float:
    """Std of the sinusoidal table that `embedding_stats` divides by for its absorption ratio."""
    length, base = _STATS_DEFAULTS["pe_length"].default, _STATS_DEFAULTS["pe_base"].default
    return sinusoidal(length, dim, base, dtype=torch.float64).std().item()


def target_sigma(target: str, n_total: int, dim: int) -> float:
    """sigma_t for a `rescale` argument (see the module docstring)."""
    kind, value = parse_sigma_target(target)
    if kind == "sigma":
        return value
    if kind == "xavier":
        return value * xavier_std(n_total, dim)
    return value * pe_std(dim) / math.sqrt(dim)


def rescale(rows: torch.Tensor, n_total: int, dim: int, generator: torch.Generator, target: str) -> Fitted:
    mean, std = mean_std(rows, f"rescale={target}")
    scale = target_sigma(target, n_total, dim) / std

    def vector_map(v: torch.Tensor) -> torch.Tensor:
        return (v - mean) * scale

    return Fitted(vector_map(rows), False, vector_map)
