"""Transforms that compose with any pretrained source, named as in the paper (section 3.4).

Each takes the found source rows X_p (float64 [n, D]), the full table size N x D and a generator, and
returns a `Fitted`: the transformed rows, the vocabulary rows they cover, and `vector_map`, the same
map for other source-space vectors (used to bring `subword_mean` rows into the transformed space).

- `standardize` (Pretrained_Xavier, eq. 1): x* = (x - mean_p) * sigma_x / sigma_p, with mean_p, sigma_p
  the mean and sample std of all values of the found rows. sigma_x is the std of a Xavier table of the
  same N x D taken *analytically*: sqrt(6/(N+D))/sqrt(3) = sqrt(2/(N+D)). The paper uses the sample std
  of a drawn table; the two differ by O(1/sqrt(N*D)) (0.05% for 5,893 x 300), and the analytic value
  makes the target exact and independent of the draw (the tests check found rows hit it to 1e-6).
- `match` (Xavier_Pretrained, eq. 4): x* = (x_x - mean(X_x)) * sigma_p / sigma_x + mean_p for an actual
  Xavier draw X_x of all N x D rows, using that draw's own sample mean and std, so the table hits the
  source's mean_p and sigma_p exactly. It fills every row; no pretrained row survives.
- `shuffle` (Pretrained_Shuffled): permute the found rows, then the columns (seeded); the multiset of
  values is unchanged. This is what the paper's method section (3.4) describes. Other source-space
  vectors (`subword_mean` piece means, given as one [k, D] batch) are permuted among themselves the same
  way, rows then the same columns, so a missing token takes another missing token's mean, as a found
  token takes another found token's row: no row keeps its own token's direction. (A lone piece mean,
  k = 1, has nowhere to go; with columns permuted it is as shuffled as it can be among its kind.) That
  row permutation is seeded from the transform's own draw, not from the generator, so every draw after
  the transform (the OOV rule's) is what it was.
- `shuffle_elements` (Pretrained_ShuffledElements): permute all n x D values of the found rows as one
  flat list (seeded), what the paper's Finding 3 says ("the elements"): the multiset of values is
  unchanged, but no row keeps its values together, so per-row norms and per-column statistics are mixed
  too. Other source-space vectors (`subword_mean` pieces) map to D values drawn from the shuffled pool
  (a generator seeded from the transform's own draw), so they carry no source direction either.
"""

from __future__ import annotations

import hashlib
from typing import Callable

import torch

from embinit.init.fitted import Fitted, mean_std
from embinit.init.random import xavier, xavier_std
from embinit.init.registry import TRANSFORM_INFO


def standardize(rows: torch.Tensor, n_total: int, dim: int, generator: torch.Generator) -> Fitted:
    mean_p, std_p = mean_std(rows, "standardize")
    scale = xavier_std(n_total, dim) / std_p

    def vector_map(v: torch.Tensor) -> torch.Tensor:
        return (v - mean_p) * scale

    return Fitted(vector_map(rows), False, vector_map)


def match(rows: torch.Tensor, n_total: int, dim: int, generator: torch.Generator) -> Fitted:
    mean_p, std_p = mean_std(rows, "match")
    x = xavier(n_total, dim, generator).double()
    out = (x - x.mean()) * (std_p / x.std()) + mean_p
    return Fitted(out, True, None)


def shuffle(rows: torch.Tensor, n_total: int, dim: int, generator: torch.Generator) -> Fitted:
    row_perm = torch.randperm(rows.shape[0], generator=generator)
    col_perm = torch.randperm(rows.shape[1], generator=generator)
    digest = hashlib.sha256(row_perm.numpy().tobytes() + col_perm.numpy().tobytes()).digest()
    map_seed = int.from_bytes(digest[:8], "little") >> 2

    def vector_map(v: torch.Tensor) -> torch.Tensor:   # [k, D]: rows permuted among themselves, then columns
        order = torch.randperm(v.shape[0], generator=torch.Generator().manual_seed(map_seed))
        return v[order][:, col_perm]

    return Fitted(rows[row_perm][:, col_perm], False, vector_map)


def shuffle_elements(rows: torch.Tensor, n_total: int, dim: int, generator: torch.Generator) -> Fitted:
    flat = rows.reshape(-1)
    pool = flat[torch.randperm(flat.numel(), generator=generator)]
    map_seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))

    def vector_map(v: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(map_seed)
        return pool[torch.randint(0, pool.numel(), v.shape, generator=g)].to(v.dtype)

    return Fitted(pool.reshape(rows.shape), False, vector_map)


# the functions of the registry entries (names, labels, descriptions) in embinit.init.registry
TRANSFORMS: dict[str, Callable[[torch.Tensor, int, int, torch.Generator], Fitted]] = {
    name: entry.load() for name, entry in TRANSFORM_INFO.items()}
