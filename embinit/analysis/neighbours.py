"""Blocked k-nearest-neighbour search over the rows of an embedding matrix, never forming N x N.

Scores are inner products (`"dot"`) or cosines (`"cosine"`: rows are unit-normalized first; an all-zero
row has cosine 0 with everything). A token is never its own neighbour.

Exact, as float64 brute force (issue 23): neighbours are ordered by descending score computed in
float64, and only true ties are ties -- scores within their float64 rounding bounds of each other
(each score s_ij's bound is (D + 4)·eps64·Σ_d |x_id x_jd|: mathematically equal scores, e.g. parallel
rows under cosine, may differ in their last float64 bits; repeated rows score bit-equal, since products
of float32 values are exact in float64) -- and among tied scores the lower row index wins, including
at the k-th place. Near-ties that float32 cannot resolve are ordered by their float64 values, as
`argsort` of the float64 score matrix orders them.

How: the score matrix is symmetric, so only the blocks on and above the diagonal are multiplied, in the
input's dtype; each block updates the running top-`keep` (k + EXTRA) of its rows and, transposed, of its
columns (half the FLOPs of the naive loop, memory O(N k + block^2)). Then every row's `keep` candidates
are rescored in float64 (N·keep·D work) and ordered by the rule above. A row's top k is certain when its
float64 k-th score beats, by more than tol64 = 2·(D + 4)·eps64·max‖x_i‖² (any two scores' bounds),
anything a non-candidate could score: the smallest kept first-pass score plus the first pass's rounding
bound (4·D·eps·max‖x_i‖² in the input's dtype; it also covers a float32 cosine's normalization). The
few rows where it does not are recomputed against every row in float64.
"""

from __future__ import annotations

import torch

from embinit.errors import EmbinitError, unknown_name

NEIGHBOUR_METRICS = ("dot", "cosine")
DEFAULT_BLOCK = 2048  # 2048^2 floats = 16 MB per score block: efficient matmuls, cache-friendlier top-k
EXTRA = 5             # candidates kept beyond k: the float64 rescoring then rarely needs a full row


def prepare(x: torch.Tensor, neighbours: str = "dot", name: str = "embeddings") -> torch.Tensor:
    """Validate a 2-D finite float matrix and normalize it when `neighbours` is cosine."""
    x = validate(x, neighbours, name)
    return _normalized(x) if neighbours == "cosine" else x


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """The rows of a float matrix scaled to unit length, in its dtype; an all-zero row stays zero. Each
    row is divided by its largest magnitude first, so its norm can neither overflow nor underflow: in
    float32 the norm of a row beyond ~1e19 is inf (the row became 0, scoring 0 with everything) and that
    of a row below ~1e-19 is 0 (the row was left unnormalized)."""
    tiny = torch.finfo(x.dtype).tiny
    y = x / x.abs().amax(dim=1, keepdim=True).clamp_min(tiny)
    y /= y.norm(dim=1, keepdim=True).clamp_min(tiny)   # >= 1 for every row that is not all zeros
    return y


def _normalized(x: torch.Tensor) -> torch.Tensor:
    return unit_rows(x).contiguous()


def validate(x: torch.Tensor, neighbours: str = "dot", name: str = "embeddings") -> torch.Tensor:
    """A 2-D finite float32/float64 matrix (integers and half precision become float32), not normalized."""
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
    return x.contiguous()


def check_k(k: int, n: int) -> None:
    if not isinstance(k, int) or k < 1:
        raise EmbinitError(f"k must be a positive integer, got {k!r}")
    if k >= n:
        raise EmbinitError(f"k={k} must be smaller than the number of tokens N={n} "
                           "(each token has only N-1 other tokens)")


def tie_tolerance(x: torch.Tensor, dtype: torch.dtype | None = None) -> float:
    """4·D·eps·max‖x_i‖² for a prepared matrix x [N, D]: a bound on the rounding error of its scores
    computed in `dtype` (default x's own)."""
    scale = float(x.pow(2).sum(dim=1).max())
    return 4 * x.shape[1] * float(torch.finfo(dtype or x.dtype).eps) * scale


def _first_pass_error(x: torch.Tensor) -> float:
    """Rounding bound of the blocked search's scores (TF32 matmuls on a GPU round to 10 bits)."""
    if x.is_cuda and x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return 4 * x.shape[1] * 2.0 ** -10 * float(x.pow(2).sum(dim=1).max())
    return tie_tolerance(x)


def _merge(vals, idx, rows: slice, scores: torch.Tensor, col0: int, keep: int) -> None:
    """Fold a score block (rows x block columns starting at col0) into the running top-`keep`."""
    m = min(keep, scores.shape[1])
    v, p = torch.topk(scores, m, dim=1)
    cat_v = torch.cat([vals[rows], v], dim=1)
    cat_i = torch.cat([idx[rows], p + col0], dim=1)
    best_v, pos = torch.topk(cat_v, keep, dim=1)
    vals[rows] = best_v
    idx[rows] = torch.gather(cat_i, 1, pos)


def _order(vals: torch.Tensor, idx: torch.Tensor, tol):
    """Sort each row by descending value, then each tie group by index. tol: a float (consecutive gaps
    <= tol tie), or a tensor shaped like vals holding each value's rounding bound (a gap ties when it
    is within the two values' bounds added)."""
    by_val = torch.sort(vals, dim=1, descending=True, stable=True).indices
    vals, idx = torch.gather(vals, 1, by_val), torch.gather(idx, 1, by_val)
    if isinstance(tol, torch.Tensor):
        tol = torch.gather(tol, 1, by_val)
        tol = tol[:, :-1] + tol[:, 1:]
    gaps = (vals[:, :-1] - vals[:, 1:]) > tol   # -inf - -inf is nan: no gap, one group
    group = torch.cat([torch.zeros_like(vals[:, :1], dtype=torch.long), gaps.long().cumsum(1)], dim=1)
    order = torch.argsort(group * (int(idx.max()) + 1) + idx, dim=1)
    return torch.gather(vals, 1, order), torch.gather(idx, 1, order)


def _bound64(a: torch.Tensor, b_abs_dot: torch.Tensor) -> torch.Tensor:
    """Rounding bound of float64 scores: (D + 4)·eps64·Σ|a_d b_d| (the dot product's γ_D bound, twice
    over, plus a float64 normalization's relative error for cosines)."""
    return (a.shape[-1] + 4) * torch.finfo(torch.float64).eps * b_abs_dot


def _exact64(raw: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, neighbours: str):
    """(float64 scores, their rounding bounds) [R, C] of rows against cols (index tensors into the
    validated, unnormalized matrix; a cosine normalizes in float64). Products of float32 values are
    exact in float64, so equal rows score bit-equal and distinct ones apart by their true difference."""
    a, b = raw[rows].double(), raw[cols].double()
    if neighbours == "cosine":
        a, b = _normalized(a), _normalized(b)
    return a @ b.T, _bound64(a, a.abs() @ b.abs().T)


def _full_rows(raw, rows: torch.Tensor, k: int, neighbours: str, block: int):
    """Top-k of the given rows against every other row, all in float64 (the uncertain rows)."""
    n = raw.shape[0]
    parts = [_exact64(raw, rows, torch.arange(c0, min(c0 + block, n), device=raw.device), neighbours)
             for c0 in range(0, n, block)]
    s, e = torch.cat([p[0] for p in parts], dim=1), torch.cat([p[1] for p in parts], dim=1)
    s[torch.arange(len(rows), device=raw.device), rows] = float("-inf")
    v, i = _order(s, torch.arange(n, device=raw.device).expand_as(s), e)
    return v[:, :k], i[:, :k]


def _refine(raw, vals, idx, k: int, neighbours: str, err: float, tol64: float, block: int):
    """(scores, indices) [N, k] from the first pass's candidates, rescored and ordered in float64;
    rows whose top k is not certain (see the module docstring) are recomputed in full."""
    n, keep = idx.shape
    out_v = torch.empty(n, k, dtype=torch.float64, device=raw.device)
    out_i = torch.empty(n, k, dtype=torch.long, device=raw.device)
    for r0 in range(0, n, 512):            # 512 x keep x D float64 gathers at a time
        rows = torch.arange(r0, min(r0 + 512, n), device=raw.device)
        cand = idx[rows]
        a = raw[rows].double()
        b = raw[cand].double()
        if neighbours == "cosine":
            a, b = _normalized(a), _normalized(b.flatten(0, 1)).view_as(b)
        s = torch.einsum("rd,rcd->rc", a, b)
        v, i = _order(s, cand, _bound64(a, torch.einsum("rd,rcd->rc", a.abs(), b.abs())))
        out_v[rows], out_i[rows] = v[:, :k], i[:, :k]
    if keep < n - 1:                        # else every other row was a candidate: certain
        bound = vals.min(dim=1).values.double() + err   # a non-candidate's float64 score is below this
        unsure = torch.nonzero(out_v[:, k - 1] - bound <= tol64).flatten()
        for c0 in range(0, len(unsure), 64):
            rows = unsure[c0:c0 + 64]
            out_v[rows], out_i[rows] = _full_rows(raw, rows, k, neighbours, block)
    return out_v, out_i


def knn(x: torch.Tensor, k: int, neighbours: str = "dot", block_size: int = DEFAULT_BLOCK,
        prepared: bool = False):
    """(scores, indices), each [N, k]: every row's k nearest other rows, exactly as float64 brute force
    orders them (the rule above); scores in x's dtype. Runs on x's device (a trial's GPU); the results
    stay there. `prepared=True`: x is already validated (and, for cosine, normalized)."""
    raw = x if prepared else validate(x, neighbours)
    x = _normalized(raw) if neighbours == "cosine" and not prepared else raw
    n = x.shape[0]
    check_k(k, n)
    keep = min(k + EXTRA, n - 1)
    dev = x.device
    vals = torch.full((n, keep), float("-inf"), dtype=x.dtype, device=dev)
    idx = torch.full((n, keep), n, dtype=torch.long, device=dev)  # n: "no neighbour yet" (only with -inf)
    b = max(1, min(int(block_size), n))
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
        tol64 = 2 * (x.shape[1] + 4) * float(torch.finfo(torch.float64).eps) * float(x.pow(2).sum(dim=1).max())
        out_v, out_i = _refine(raw, vals, idx, k, neighbours, _first_pass_error(x), tol64, b)
    return out_v.to(x.dtype), out_i


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
