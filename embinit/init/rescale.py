"""`rescale=TARGET`: the dose of the embedding scale as a transform (issue 23, the dose-response study).

The rows are centered on their mean and scaled to a target standard deviation sigma_t:
x* = (x - mean) * sigma_t / std, with mean and std over all values of the rows (as `standardize`, eq. 1,
does; `rescale=1x` *is* `standardize`). TARGET is one of:
- `0.05`: sigma_t given absolutely;
- `4x`: a multiple of Xavier's sigma for the whole N x D table, sqrt(2 / (N + D)) (analytic, as in
  `standardize`);
- `absorption:0.5`: the sigma whose absorption ratio (`embinit.stats`: std(x * sqrt(D)) / std(PE)) is
  0.5, sigma_t = 0.5 * std(PE) / sqrt(D), with std(PE) of the PE table `pe` (`embinit.stats.PETable`:
  positions and base). `build_table(pe=...)` passes it (the registry entry's `takes_pe`): a trial's own
  table (`pe_positions`, `pe_base`; embinit.train.prepare `pe_table`), so the logged `emb/absorption` of
  the rescaled rows is the target; without one, `embedding_stats`' defaults (5,000 positions, base 10^4).

It applies to any source: pretrained found rows (OOV rows are filled afterwards, in the rescaled space)
and random inits (the whole drawn table). It draws nothing from the generator.
"""

from __future__ import annotations

import math

import torch

from embinit.errors import EmbinitError
from embinit.init.random import xavier_std
from embinit.init.registry import parse_sigma_target
from embinit.init.fitted import Fitted, mean_std
from embinit.stats import DEFAULT_PE, PETable, pe_std


def target_sigma(target: str, n_total: int, dim: int, pe: PETable = DEFAULT_PE) -> float:
    """sigma_t for a `rescale` argument (see the module docstring); `pe` only matters to `absorption:R`."""
    kind, value = parse_sigma_target(target)
    if kind == "sigma":
        return value
    if kind == "xavier":
        return value * xavier_std(n_total, dim)
    spread = pe_std(dim, pe)
    if not spread > 0:   # a 1 x 1 table: one value, no spread to take a ratio to
        raise EmbinitError(f"rescale={target}: the PE table of {pe.positions} position(s) at D={dim} has no "
                           f"spread (std {spread}), so no absorption ratio can be targeted")
    return value * spread / math.sqrt(dim)


def rescale(rows: torch.Tensor, n_total: int, dim: int, generator: torch.Generator, target: str,
            *, pe: PETable = DEFAULT_PE) -> Fitted:
    mean, std = mean_std(rows, f"rescale={target}")
    scale = target_sigma(target, n_total, dim, pe) / std

    def vector_map(v: torch.Tensor) -> torch.Tensor:
        return (v - mean) * scale

    return Fitted(vector_map(rows), False, vector_map)
