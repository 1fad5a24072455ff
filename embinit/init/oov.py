"""Rules for the rows a pretrained source lacks, applied after the transform (in its space).
`focus` (a similarity-weighted mix of the found rows, FOCUS-style) lives in `embinit.init.focus`.

Each rule is `fn(ctx) -> float64 [n_missing, D]`. The statistics a rule uses (mean, covariance) come
from the *transformed* found rows, so a standardized table gets standardized fill rows.

`mean_cov` samples N(mu, Sigma) with the found rows' full covariance. Hugging Face's mean-resizing
(`resize_token_embeddings(mean_resizing=True)`) shrinks Sigma by 1e-9, which makes new rows almost
exactly the mean; here the spread is kept, so fill rows look like found rows to second order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from embinit.errors import EmbinitError
from embinit.init.random import xavier_bound
from embinit.init.registry import OOV_INFO


@dataclass
class OOVContext:
    missing: torch.Tensor              # int64 [m] vocabulary indices without a source row
    found_rows: torch.Tensor           # float64 [n, D], transformed
    n_total: int
    dim: int
    generator: torch.Generator
    source: str                        # for messages
    piece: dict[int, torch.Tensor] | None  # vocab index -> subword-mean row (transformed); None: no tokenizer
    found: torch.Tensor | None = None     # int64 [n] vocabulary indices of `found_rows`, in their order
    tokens: list[str] | None = None       # the vocabulary
    corpus: list[list[str]] | None = None  # the side's training text as tokens (`focus`); None: not given
    cache_dir: object = None              # build_table's cache_dir (None: default root, False: no cache)


def xavier_rows(ctx: OOVContext) -> torch.Tensor:
    a = xavier_bound(ctx.n_total, ctx.dim)   # the bound of the whole N x D table, as if never found
    return torch.empty(len(ctx.missing), ctx.dim).uniform_(-a, a, generator=ctx.generator).double()


def mean_rows(ctx: OOVContext) -> torch.Tensor:
    return ctx.found_rows.mean(0, keepdim=True).expand(len(ctx.missing), -1).clone()


def mean_cov_rows(ctx: OOVContext) -> torch.Tensor:
    x = ctx.found_rows
    mu = x.mean(0)
    centered = x - mu
    cov = centered.T @ centered / max(1, x.shape[0] - 1)
    # eigh tolerates the rank-deficient covariance of fewer rows than dimensions
    evals, evecs = torch.linalg.eigh(cov)
    root = evecs * evals.clamp(min=0).sqrt()
    z = torch.randn(len(ctx.missing), ctx.dim, generator=ctx.generator, dtype=torch.float64)
    return mu + z @ root.T


def subword_mean_rows(ctx: OOVContext) -> torch.Tensor:
    """Rows of tokens the tokenizer cannot split into known pieces (e.g. unmapped specials) get the
    mean of the found rows."""
    if ctx.piece is None:
        raise EmbinitError(f"oov rule 'subword_mean' needs a source with a tokenizer (bert, mbert, t5, "
                           f"mt5, hf); {ctx.source} has none")
    out = mean_rows(ctx)
    for k, idx in enumerate(ctx.missing.tolist()):
        if idx in ctx.piece:
            out[k] = ctx.piece[idx]
    return out


def zero_rows(ctx: OOVContext) -> torch.Tensor:
    return torch.zeros(len(ctx.missing), ctx.dim, dtype=torch.float64)


# the functions of the registry entries (names, descriptions) in embinit.init.registry
OOV_RULES: dict[str, Callable[[OOVContext], torch.Tensor]] = {
    name: entry.load() for name, entry in OOV_INFO.items()}
