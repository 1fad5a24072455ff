"""Blocked k-nearest-neighbour search over the rows of an embedding matrix, never forming N x N.

Scores are inner products (`"dot"`) or cosines (`"cosine"`: rows are unit-normalized first; an all-zero
row has cosine 0 with everything). A token is never its own neighbour.

Tie rule, so results are deterministic: neighbours are ordered by descending score, and among equal
scores the lower row index wins, including at the k-th place (if rows 7 and 3 tie for the last slot,
row 3 gets it). "Equal" is defined so that rounding cannot decide it: sorted by descending score, two
neighbours in a row whose scores differ by at most tol = 4·D·eps·max‖x_i‖² (eps of the input's dtype;
max‖x_i‖² bounds every |score|, so tol is well above the rounding error of a D-term dot product) are
in one tie group, and a tie group is ordered by index. Without a tolerance, mathematically equal scores
(parallel rows under cosine, repeated rows) differ in their last bits depending on the BLAS kernel, the
block shape and whether a block was transposed, and their order followed the platform.

How: the score matrix is symmetric, so only the blocks on and above the diagonal are multiplied; each
block updates the running top-(k+1) of its rows and, transposed, of its columns (half the FLOPs of the
naive loop, memory O(N k + block^2)). Keeping k+1 values tells exactly which rows have a tie across
the k-th place; only those rows are recomputed with a stable full sort.
"""

from __future__ import annotations

import torch

from embinit.errors import EmbinitError, unknown_name

NEIGHBOUR_METRICS = ("dot", "cosine")
DEFAULT_BLOCK = 2048  # 2048^2 floats = 16 MB per score block: efficient matmuls, cache-friendlier top-k


def prepare(x: torch.Tensor, neighbours: str = "dot", name: str = "embeddings") -> torch.Tensor:
    """Validate a 2-D finite float matrix and normalize it when `neighbours` is cosine."""
    if neighbours not in NEIGHBOUR_METRICS:
        raise unknown_name("neighbour metric", neighbours, NEIGHBOUR_METRICS)
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    if x.dim() != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise EmbinitError(f"{name} must be a non-empty 2-D matrix, got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()   # integers, and half precision (slow and tie-prone on CPU)
    if not torch.isfinite(x).all():
        raise EmbinitError(f"{name} contains NaN or infinite values")
    if neighbours == "cosine":
        x = x / x.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    return x.contiguous()


def check_k(k: int, n: int) -> None:
    if not isinstance(k, int) or k < 1:
        raise EmbinitError(f"k must be a positive integer, got {k!r}")
    if k >= n:
        raise EmbinitError(f"k={k} must be smaller than the number of tokens N={n} "
                           "(each token has only N-1 other tokens)")


def tie_tolerance(x: torch.Tensor) -> float:
    """tol of the tie rule above for a prepared matrix x [N, D]."""
    scale = float(x.pow(2).sum(dim=1).max())
    return 4 * x.shape[1] * float(torch.finfo(x.dtype).eps) * scale


def _merge(vals, idx, rows: slice, scores: torch.Tensor, col0: int, keep: int) -> None:
    """Fold a score block (rows x block columns starting at col0) into the running top-`keep`."""
    m = min(keep, scores.shape[1])
    v, p = torch.topk(scores, m, dim=1)
    cat_v = torch.cat([vals[rows], v], dim=1)
    cat_i = torch.cat([idx[rows], p + col0], dim=1)
    best_v, pos = torch.topk(cat_v, keep, dim=1)
    vals[rows] = best_v
    idx[rows] = torch.gather(cat_i, 1, pos)


def _order(vals: torch.Tensor, idx: torch.Tensor, tol: float):
    """Sort each row by descending value, then each tie group (consecutive gaps <= tol) by index."""
    by_val = torch.sort(vals, dim=1, descending=True, stable=True).indices
    vals, idx = torch.gather(vals, 1, by_val), torch.gather(idx, 1, by_val)
    gaps = (vals[:, :-1] - vals[:, 1:]) > tol   # -inf - -inf is nan: no gap, one group
    group = torch.cat([torch.zeros_like(vals[:, :1], dtype=torch.long), gaps.long().cumsum(1)], dim=1)
    order = torch.argsort(group * (int(idx.max()) + 1) + idx, dim=1)
    return torch.gather(vals, 1, order), torch.gather(idx, 1, order)


def _tied_at_k(vals: torch.Tensor, k: int, tol: float) -> torch.Tensor:
    """Rows whose k-th and (k+1)-th scores are one tie group (vals has k+1 sorted columns)."""
    return torch.nonzero((vals[:, k - 1] - vals[:, k] <= tol) | (vals[:, k - 1] == vals[:, k])).flatten()


def _exact_rows(x: torch.Tensor, rows: torch.Tensor, k: int, tol: float):
    """Top-k of the given rows by a full sort (for rows whose k-th place is tied)."""
    s = x[rows] @ x.T
    s[torch.arange(len(rows), device=x.device), rows] = float("-inf")
    idx = torch.arange(x.shape[0], device=x.device).expand_as(s)
    v, i = _order(s, idx, tol)
    return v[:, :k], i[:, :k]


def knn(x: torch.Tensor, k: int, neighbours: str = "dot", block_size: int = DEFAULT_BLOCK,
        prepared: bool = False):
    """(scores, indices), each [N, k]: every row's k nearest other rows, by the tie-break above.
    Runs on x's device (a trial's GPU); the results stay there."""
    if not prepared:
        x = prepare(x, neighbours)
    n = x.shape[0]
    check_k(k, n)
    keep = k + 1  # one extra to detect a tie across the k-th place
    dev = x.device
    vals = torch.full((n, keep), float("-inf"), dtype=x.dtype, device=dev)
    idx = torch.full((n, keep), n, dtype=torch.long, device=dev)  # n: "no neighbour yet" (only with -inf)
    b = max(1, min(int(block_size), n))
    tol = tie_tolerance(x)
    # two score buffers reused for every block: fresh 16-64 MB tensors per block cost page faults
    buf, buf_t = torch.empty(b * b, dtype=x.dtype, device=dev), torch.empty(b * b, dtype=x.dtype, device=dev)
    with torch.no_grad():
        for i0 in range(0, n, b):
            ri = slice(i0, min(i0 + b, n))
            xi = x[ri]
            for j0 in range(i0, n, b):
                rj = slice(j0, min(j0 + b, n))
                ni, nj = ri.stop - i0, rj.stop - j0
                s = buf[: ni * nj].view(ni, nj)
                torch.mm(xi, x[rj].T, out=s)
                if j0 == i0:
                    s.fill_diagonal_(float("-inf"))
                _merge(vals, idx, ri, s, j0, keep)
                if j0 != i0:
                    st = buf_t[: ni * nj].view(nj, ni)
                    st.copy_(s.T)
                    _merge(vals, idx, rj, st, i0, keep)
        vals, idx = _order(vals, idx, tol)
        tied = _tied_at_k(vals, k, tol) if keep <= n - 1 else torch.empty(0, dtype=torch.long, device=dev)
        out_v, out_i = vals[:, :k].clone(), idx[:, :k].clone()
        for c0 in range(0, len(tied), b):
            rows = tied[c0:c0 + b]
            out_v[rows], out_i[rows] = _exact_rows(x, rows, k, tol)
    return out_v, out_i


def topk_excluding(scores: torch.Tensor, k: int, exclude: torch.Tensor | None = None):
    """Top-k per row of a [B, V] score block, exactly equal scores ordered by lower column (the caller's
    scores are taken as computed: no tolerance), after setting the columns in `exclude` ([B, E] long,
    -1 = none) to -inf. Used for query-vs-vocabulary searches."""
    if exclude is not None:
        valid = exclude >= 0
        rows = torch.arange(scores.shape[0]).unsqueeze(1).expand_as(exclude)
        scores[rows[valid], exclude[valid]] = float("-inf")
    keep = min(k + 1, scores.shape[1])
    v, i = torch.topk(scores, keep, dim=1)
    v, i = _order(v, i, 0.0)
    if keep > k:
        tied = torch.nonzero(v[:, k - 1] == v[:, k]).flatten()
        if len(tied):
            sv, si = torch.sort(scores[tied], dim=1, descending=True, stable=True)
            v[tied], i[tied] = sv[:, :keep], si[:, :keep]
    return v[:, :k], i[:, :k]
