"""KNN match similarity between two embedding spaces over the same tokens (the "butterfly effect" post).

For token i, N_K(i) is the set of its K nearest *other* tokens in space 1 (by inner product, as the post
uses, or cosine), N'_K(i) the same in space 2. Two per-token scores are offered, both named:

- `"jaccard"`: |N_K ∩ N'_K| / |N_K ∪ N'_K| -- the formula the post writes (the default);
- `"overlap"`: |N_K ∩ N'_K| / K -- what the post's published code computes.

With I = |∩|, jaccard = I / (2K - I) <= overlap = I / K; both are 1 exactly when the sets agree.
The spaces may differ in dimension (only row i of each is compared with the other rows of its own
space); they must have the same rows in the same order (see `align` for vocabularies that differ).

Neighbours come from `embinit.analysis.neighbours.knn` (blocked, never N x N; exactly as float64 brute
force orders them, true ties to the lower index).
Aggregates: mean, median (for an even count the lower of the two middle values, as `torch.median`)
and the histogram of I (K+1 bins: 0..K shared neighbours). Optional per-token
weights (e.g. training-text frequencies, as the post suggests) give a weighted mean and median; a
boolean mask drops tokens from the aggregates only (they still count as neighbours of others).
"""

from __future__ import annotations

import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import torch

from embinit.analysis.neighbours import DEFAULT_BLOCK, check_k, knn, validate
from embinit.errors import EmbinitError, unknown_name

SCORES = ("jaccard", "overlap")
# GPT-2 'Ġ' (a leading space), SentencePiece '▁', WordPiece '##', GPT-2 'Ċ' (newline)
BPE_MARKERS = ("\u0120", "\u2581", "##", "\u010a")


@dataclass
class SimilarityResult:
    """Per-token scores and their aggregates. `intersections[i]` = |N_K(i) ∩ N'_K(i)|."""

    k: int
    metric: str
    neighbours: str
    per_token: torch.Tensor          # float [N]
    intersections: torch.Tensor      # long [N]
    included: torch.Tensor           # bool [N]: counted in the aggregates
    summary: dict = field(default_factory=dict)

    def to_metrics(self, prefix: str = "sim") -> dict[str, float]:
        """Flat namespaced metrics for MLflow, e.g. `sim/knn_jaccard_mean`."""
        name = f"{prefix}/knn_{self.metric}"
        out = {f"{name}_{key}": float(v) for key, v in self.summary.items()
               if key in ("mean", "median", "weighted_mean", "weighted_median")}
        out[f"{prefix}/tokens"] = float(self.summary["tokens"])
        return out


def per_token_scores(idx1: torch.Tensor, idx2: torch.Tensor, metric: str = "jaccard"):
    """(scores, intersections) from two [N, K] neighbour-index matrices (rows hold distinct indices)."""
    if metric not in SCORES:
        raise unknown_name("similarity metric", metric, SCORES)
    if idx1.shape != idx2.shape:
        raise EmbinitError(f"neighbour lists differ in shape: {tuple(idx1.shape)} vs {tuple(idx2.shape)}")
    idx1, idx2 = idx1.cpu(), idx2.cpu()   # N x K integers: small, whichever device searched them
    k = idx1.shape[1]
    inter = torch.zeros(idx1.shape[0], dtype=torch.long)
    for r0 in range(0, idx1.shape[0], 8192):  # N x K x K booleans per chunk, small
        a, b = idx1[r0:r0 + 8192], idx2[r0:r0 + 8192]
        inter[r0:r0 + 8192] = (a.unsqueeze(2) == b.unsqueeze(1)).sum(dim=(1, 2))
    denom = (2 * k - inter) if metric == "jaccard" else torch.full_like(inter, k)
    return inter.double() / denom.double(), inter


def _weighted_median(values: torch.Tensor, weights: torch.Tensor) -> float:
    order = torch.argsort(values, stable=True)
    v, w = values[order], weights[order]
    cum = torch.cumsum(w, 0)
    return float(v[int(torch.searchsorted(cum, cum[-1] / 2))])


def summarize(scores: torch.Tensor, inter: torch.Tensor, k: int, included: torch.Tensor,
              weights: torch.Tensor | None = None) -> dict:
    """mean, median, histogram of shared-neighbour counts, and weighted versions when given weights."""
    s, i = scores[included], inter[included]
    if len(s) == 0:
        raise EmbinitError("no tokens left to aggregate after exclusions")
    out = {"tokens": int(len(s)), "mean": float(s.mean()), "median": float(s.median()),
           "histogram": torch.bincount(i, minlength=k + 1).tolist()}
    if weights is not None:
        w = weights[included].double()
        if float(w.sum()) <= 0:
            raise EmbinitError("token weights of the included tokens sum to zero")
        out["weighted_mean"] = float((s * w).sum() / w.sum())
        out["weighted_median"] = _weighted_median(s, w)
    return out


def is_punctuation(token: str) -> bool:
    """True when the token, without BPE markers and whitespace, is non-empty and all punctuation or
    symbol characters (Unicode categories P* and S*), e.g. 'Ġ,', '...', '$'; '<unk>' is not."""
    t = token
    for m in BPE_MARKERS:
        t = t.replace(m, "")
    t = t.strip()
    return bool(t) and all(unicodedata.category(ch)[0] in "PS" for ch in t)


def knn_match_similarity(a: torch.Tensor, b: torch.Tensor, k: int = 10, metric: str = "jaccard",
                         neighbours: str = "dot", weights=None, exclude=None,
                         tokens: Sequence[str] | None = None, exclude_punctuation: bool = False,
                         block_size: int = DEFAULT_BLOCK) -> SimilarityResult:
    """KNN match similarity of two [N, D1] and [N, D2] tables whose row i is the same token.

    weights: per-token non-negative weights [N] (e.g. counts) for the weighted aggregates.
    exclude: bool [N], True = leave out of the aggregates; exclude_punctuation needs `tokens`.
    """
    if metric not in SCORES:
        raise unknown_name("similarity metric", metric, SCORES)
    # validated, not normalized: knn normalizes a cosine itself and rescores from the originals in float64
    a, b = validate(a, neighbours, "space A"), validate(b, neighbours, "space B")
    n = a.shape[0]
    if b.shape[0] != n:
        raise EmbinitError(f"the two spaces have different numbers of tokens: {n} vs {b.shape[0]} "
                           "(align them on shared tokens first)")
    check_k(k, n)
    included = _included(n, exclude, tokens, exclude_punctuation)
    w = None
    if weights is not None:
        w = torch.as_tensor(weights, dtype=torch.float64)
        if w.shape != (n,) or (w < 0).any():
            raise EmbinitError(f"weights must be {n} non-negative numbers, got shape {tuple(w.shape)}")
    idx1, idx2 = _both_knn(a, b, k, neighbours, block_size)
    scores, inter = per_token_scores(idx1, idx2, metric)
    return SimilarityResult(k, metric, neighbours, scores, inter, included,
                            summarize(scores, inter, k, included, w))


def _both_knn(a, b, k, neighbours, block_size):
    """Neighbour lists of both spaces. With >= 2 torch threads the two searches run side by side, each
    single-threaded (its small top-k/copy steps parallelize poorly; measured ~1.3x less wall time on 2
    cores); the thread setting is restored afterwards."""
    threads = torch.get_num_threads()
    if threads < 2:
        return knn(a, k, neighbours, block_size)[1], knn(b, k, neighbours, block_size)[1]
    torch.set_num_threads(max(1, threads // 2))
    try:
        with ThreadPoolExecutor(2) as pool:
            fa = pool.submit(knn, a, k, neighbours, block_size)
            fb = pool.submit(knn, b, k, neighbours, block_size)
            return fa.result()[1], fb.result()[1]
    finally:
        torch.set_num_threads(threads)


def _included(n: int, exclude, tokens, exclude_punctuation: bool) -> torch.Tensor:
    included = torch.ones(n, dtype=torch.bool)
    if exclude is not None:
        ex = torch.as_tensor(exclude, dtype=torch.bool)
        if ex.shape != (n,):
            raise EmbinitError(f"exclude must be a boolean mask of length {n}, got {tuple(ex.shape)}")
        included &= ~ex
    if exclude_punctuation:
        if tokens is None or len(tokens) != n:
            raise EmbinitError("exclude_punctuation needs the list of the N tokens")
        included &= torch.tensor([not is_punctuation(t) for t in tokens], dtype=torch.bool)
    return included


def align(tokens_a: Sequence[str], a: torch.Tensor, tokens_b: Sequence[str], b: torch.Tensor):
    """Restrict two tables to the tokens they share, in the order of A: (tokens, a_rows, b_rows).

    Similarity is only defined over a common token set, and neighbours are searched within it, so with
    different vocabularies the result describes the shared tokens only (the count is reported)."""
    if len(tokens_a) != a.shape[0] or len(tokens_b) != b.shape[0]:
        raise EmbinitError(f"token lists do not match the tables: {len(tokens_a)} tokens for "
                           f"{a.shape[0]} rows, {len(tokens_b)} tokens for {b.shape[0]} rows")
    pos_b = {t: i for i, t in enumerate(tokens_b)}
    shared = [(i, pos_b[t]) for i, t in enumerate(tokens_a) if t in pos_b]
    if not shared:
        raise EmbinitError("the two vocabularies share no token")
    ia = torch.tensor([i for i, _ in shared], dtype=torch.long)
    ib = torch.tensor([j for _, j in shared], dtype=torch.long)
    return [tokens_a[i] for i, _ in shared], a[ia], b[ib]
