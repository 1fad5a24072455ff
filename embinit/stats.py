"""Statistics of an embedding table (the paper's Tables 2, 6 and 8) as one flat dict for logging.

Keys (with the default prefix `emb/`), all floats:
- `min`, `max`, `mean`, `std`: over all values of the table (std is the sample std, as in the paper);
- `scaled_min`, ..., `scaled_std`: the same after the transformer's x sqrt(D) input scaling;
- `pe_min`, `pe_max`, `pe_mean`, `pe_std`: the sinusoidal position encodings of `pe_length` positions
  (default 5,000: the paper's Table 6 PE row, mean 0.131, is that table's; a trial passes its
  `pe_positions`). Its std is 0.695 at D=300, not the paper's 0.67: no one table has both (a 1,000-row
  table has std 0.669 but mean 0.229), so `pe_std` is ~4% above the paper's and `absorption` ~4% below;
- `absorption`: std(scaled embeddings) / std(PE). Above 1 the token signal dominates the sum that
  enters the transformer; far above 1 (raw GloVe x sqrt(300): ~9) the position signal is drowned;
- `row_norm_mean`, `row_norm_std`: L2 norms of the (unscaled) rows;
- `rows`, `dim`;
- with `coverage` (from `build_table`): `coverage_rows_found`, `coverage_row_share`,
  `coverage_token_share` (when the vocabulary has counts), `coverage_duplicate_words` (a word-vector
  file's words that the vocabulary takes and the file holds more than once; each takes its first row).

`PETable` names a PE table (positions, base) and `pe_std` its std, the denominator of `absorption`: what
targets an absorption ratio (`rescale=absorption:R`, embinit.init.rescale) reads it here, from the table
the statistic will be measured on, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from embinit.errors import EmbinitError
from embinit.posenc import sinusoidal

COVERAGE_KEYS = ("rows_found", "row_share", "token_share", "duplicate_words")
DEFAULT_PE_POSITIONS = 5000   # TrialConfig.pe_positions' default (embinit/config.py, which avoids torch)
DEFAULT_PE_BASE = 10000.0     # TrialConfig.pe_base's default (Vaswani et al.)


class PETable(NamedTuple):
    """The sinusoidal table an absorption ratio is measured against: `embedding_stats`' `pe_length` and
    `pe_base`. A trial's is (`pe_positions`, `pe_base`) (embinit.train.prepare `pe_table`)."""
    positions: int = DEFAULT_PE_POSITIONS
    base: float = DEFAULT_PE_BASE


DEFAULT_PE = PETable()   # embedding_stats' default table: what absorption is measured on unless told


def _summary(x: torch.Tensor, prefix: str) -> dict[str, float]:
    return {f"{prefix}min": x.min().item(), f"{prefix}max": x.max().item(),
            f"{prefix}mean": x.mean().item(), f"{prefix}std": x.std().item() if x.numel() > 1 else 0.0}


def pe_std(dim: int, pe: PETable = DEFAULT_PE) -> float:
    """The std of the PE table `pe` at width `dim`: `embedding_stats`' `pe_std`, the same computation."""
    return _summary(sinusoidal(pe.positions, dim, pe.base, dtype=torch.float64), "")["std"]


def embedding_stats(table: torch.Tensor, pe_length: int = DEFAULT_PE_POSITIONS, pe_base: float = DEFAULT_PE_BASE,
                    coverage: dict | None = None, prefix: str = "emb/") -> dict[str, float]:
    """Flat, namespaced statistics of an N x D table (see the module docstring for the keys)."""
    if table.ndim != 2 or table.numel() == 0:
        raise EmbinitError(f"expected a non-empty 2-D embedding table, got shape {tuple(table.shape)}")
    x = table.detach().to(torch.float64)
    n, dim = x.shape
    scaled = x * math.sqrt(dim)
    pe = sinusoidal(pe_length, dim, pe_base, dtype=torch.float64)
    out = {f"{prefix}rows": float(n), f"{prefix}dim": float(dim)}
    out.update(_summary(x, prefix))
    out.update(_summary(scaled, prefix + "scaled_"))
    out.update(_summary(pe, prefix + "pe_"))
    pe_sigma = out[f"{prefix}pe_std"]
    out[f"{prefix}absorption"] = out[f"{prefix}scaled_std"] / pe_sigma if pe_sigma > 0 else math.inf
    norms = x.norm(dim=1)
    out[f"{prefix}row_norm_mean"] = norms.mean().item()
    out[f"{prefix}row_norm_std"] = norms.std().item() if n > 1 else 0.0
    for key in COVERAGE_KEYS:
        if coverage and coverage.get(key) is not None:
            out[f"{prefix}coverage_{key}"] = float(coverage[key])
    return out
