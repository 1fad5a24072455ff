import pytest
import torch

from embinit.analysis.neighbours import knn, topk_excluding
from embinit.analysis.similarity import align, is_punctuation, knn_match_similarity, per_token_scores
from embinit.errors import EmbinitError

torch.set_num_threads(1)


def brute_knn(x: torch.Tensor, k: int, neighbours: str = "dot") -> torch.Tensor:
    """The full N x N matrix, self excluded, by the tie rule written out: sorted by descending score,
    neighbours whose consecutive scores differ by <= 4 D eps max|x_i|^2 form a group, ordered by index."""
    if neighbours == "cosine":
        x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)
    tol = 4 * x.shape[1] * torch.finfo(x.dtype).eps * float((x * x).sum(1).max())
    s = x @ x.T
    s.fill_diagonal_(float("-inf"))
    out = []
    for row in s.tolist():
        ranked = sorted(range(len(row)), key=lambda j: -row[j])
        groups, prev = [], None
        for j in ranked:
            if prev is None or row[prev] - row[j] > tol:
                groups.append([])
            groups[-1].append(j)
            prev = j
        out.append([j for g in groups for j in sorted(g)][:k])
    return torch.tensor(out)


def brute_similarity(a, b, k, metric, neighbours="dot"):
    n1, n2 = brute_knn(a, k, neighbours), brute_knn(b, k, neighbours)
    out = []
    for r1, r2 in zip(n1.tolist(), n2.tolist()):
        inter = len(set(r1) & set(r2))
        out.append(inter / len(set(r1) | set(r2)) if metric == "jaccard" else inter / k)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("metric", ["jaccard", "overlap"])
@pytest.mark.parametrize("neighbours", ["dot", "cosine"])
def test_equals_brute_force_on_random_matrices(metric, neighbours):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(301, 16, generator=g, dtype=torch.float64)
    # space B: correlated with A (so scores are spread over 0..1) and of another dimension
    b = torch.cat([a, 0.7 * torch.randn(301, 8, generator=g, dtype=torch.float64)], dim=1)
    res = knn_match_similarity(a, b, k=7, metric=metric, neighbours=neighbours, block_size=64)
    expected = brute_similarity(a, b, 7, metric, neighbours)
    assert torch.allclose(res.per_token, expected)
    assert 0.0 < res.summary["mean"] < 1.0
    assert res.summary["mean"] == pytest.approx(float(expected.mean()))
    assert res.summary["median"] == pytest.approx(float(expected.median()))
    assert sum(res.summary["histogram"]) == 301 and len(res.summary["histogram"]) == 8


def test_jaccard_and_overlap_relation():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(200, 8, generator=g), torch.randn(200, 8, generator=g)
    j = knn_match_similarity(a, b, k=10, metric="jaccard", block_size=50)
    o = knn_match_similarity(a, b, k=10, metric="overlap", block_size=50)
    assert torch.equal(j.intersections, o.intersections)
    inter = j.intersections.double()
    assert torch.allclose(j.per_token, inter / (20 - inter))
    assert torch.allclose(o.per_token, inter / 10)


@pytest.mark.parametrize("neighbours", ["dot", "cosine"])
def test_knn_equals_brute_force_with_many_ties(neighbours):
    # small integer entries in 3 dimensions: scores repeat constantly, also across the k-th place
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-2, 3, (157, 3), generator=g).double()
    for k in (1, 4, 12):
        _, idx = knn(x, k, neighbours, block_size=32)
        assert torch.equal(idx, brute_knn(x, k, neighbours)), k


@pytest.mark.parametrize("neighbours", ["dot", "cosine"])
def test_knn_ties_do_not_depend_on_block_shape(neighbours):
    # parallel rows of different lengths: equal cosines whose computed values differ in the last bits
    g = torch.Generator().manual_seed(6)
    x = torch.randint(-2, 3, (157, 3), generator=g).double()
    x = x * torch.randint(1, 4, (157, 1), generator=g).double()
    ref = knn(x, 9, neighbours, block_size=157)[1]
    for b in (1, 7, 32, 100):
        assert torch.equal(knn(x, 9, neighbours, block_size=b)[1], ref), b


def test_scores_one_rounding_error_apart_tie():
    # 1 + 2^-52 and 1 are one ulp apart: rounding noise, not order, so the lower index (1) wins
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0 + 2.0 ** -52, 0.0], [0.0, 1.0]], dtype=torch.float64)
    assert knn(x, 2, block_size=4)[1][0].tolist() == [1, 2]
    assert knn(x, 1, block_size=1)[1][0].tolist() == [1]


def test_tie_break_lower_index_wins():
    x = torch.tensor([[1.0, 0.0]] * 5 + [[0.0, 1.0]])  # rows 0-4 identical
    _, idx = knn(x, 2, block_size=2)
    assert idx[0].tolist() == [1, 2]
    assert idx[3].tolist() == [0, 1]
    assert idx[5].tolist() == [0, 1]  # every other row scores 0 with row 5


def test_identical_spaces_score_one():
    x = torch.randn(120, 12, generator=torch.Generator().manual_seed(4))
    for metric in ("jaccard", "overlap"):
        res = knn_match_similarity(x, x.clone(), k=5, metric=metric, block_size=40)
        assert torch.all(res.per_token == 1.0)
        assert res.summary["histogram"][-1] == 120


def test_invariant_to_rotation_of_one_space():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(150, 10, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(10, 10, generator=g, dtype=torch.float64))
    y = torch.randn(150, 10, generator=g, dtype=torch.float64)
    res = knn_match_similarity(x @ q, x, k=6, block_size=64)
    assert torch.all(res.per_token == 1.0)
    base = knn_match_similarity(x, y, k=6, block_size=64)
    rotated = knn_match_similarity(x @ q, y, k=6, block_size=64)
    assert torch.equal(base.per_token, rotated.per_token)


def test_k_too_large_is_a_clear_error():
    x = torch.randn(10, 4)
    with pytest.raises(EmbinitError, match=r"k=10 must be smaller than the number of tokens N=10"):
        knn_match_similarity(x, x, k=10)
    assert knn_match_similarity(x, x, k=9).summary["mean"] == 1.0  # N-1 neighbours: all of them


def test_input_errors():
    with pytest.raises(EmbinitError, match="different numbers of tokens: 10 vs 9"):
        knn_match_similarity(torch.randn(10, 4), torch.randn(9, 4), k=3)
    bad = torch.randn(10, 4)
    bad[2, 1] = float("nan")
    with pytest.raises(EmbinitError, match="NaN"):
        knn_match_similarity(bad, torch.randn(10, 4), k=3)
    with pytest.raises(EmbinitError, match="'cos' is not a registered neighbour metric"):
        knn_match_similarity(torch.randn(10, 4), torch.randn(10, 4), k=3, neighbours="cos")
    with pytest.raises(EmbinitError, match="'iou' is not a registered similarity metric"):
        knn_match_similarity(torch.randn(10, 4), torch.randn(10, 4), k=3, metric="iou")


def test_cosine_with_zero_rows_is_finite():
    x = torch.randn(20, 4, generator=torch.Generator().manual_seed(6))
    x[3] = 0
    res = knn_match_similarity(x, x + 0.01, k=3, neighbours="cosine")
    assert torch.isfinite(res.per_token).all()


def test_weights_and_exclusions():
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(60, 6, generator=g), torch.randn(60, 6, generator=g)
    tokens = [f"Ġw{i}" for i in range(60)]
    tokens[5], tokens[9] = "Ġ,", "..."
    full = knn_match_similarity(a, b, k=4)
    w = torch.zeros(60)
    w[11] = 3.0
    weighted = knn_match_similarity(a, b, k=4, weights=w)
    assert weighted.summary["weighted_mean"] == pytest.approx(float(full.per_token[11]))
    assert weighted.summary["weighted_median"] == pytest.approx(float(full.per_token[11]))
    ex = knn_match_similarity(a, b, k=4, tokens=tokens, exclude_punctuation=True)
    keep = torch.ones(60, dtype=torch.bool)
    keep[[5, 9]] = False
    assert ex.summary["tokens"] == 58
    assert ex.summary["mean"] == pytest.approx(float(full.per_token[keep].mean()))
    assert torch.equal(ex.per_token, full.per_token)  # exclusion touches the aggregates only
    metrics = ex.to_metrics()
    assert metrics["sim/knn_jaccard_mean"] == ex.summary["mean"] and metrics["sim/tokens"] == 58


def test_is_punctuation():
    assert is_punctuation("Ġ,") and is_punctuation("...") and is_punctuation("$") and is_punctuation("--")
    assert not is_punctuation("Ġthe") and not is_punctuation("<unk>") and not is_punctuation("Ġ")
    assert not is_punctuation("a.") and not is_punctuation("##s")


def test_align_on_shared_tokens():
    a, b = torch.arange(8.0).view(4, 2), torch.arange(10.0, 16.0).view(3, 2)
    tokens, ra, rb = align(["x", "y", "z", "w"], a, ["w", "q", "y"], b)
    assert tokens == ["y", "w"]
    assert torch.equal(ra, a[[1, 3]]) and torch.equal(rb, b[[2, 0]])
    with pytest.raises(EmbinitError, match="share no token"):
        align(["x"], a[:1], ["q"], b[:1])


def test_per_token_scores_shape_mismatch():
    with pytest.raises(EmbinitError, match="differ in shape"):
        per_token_scores(torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long))


def test_topk_excluding_masks_and_breaks_ties_by_index():
    scores = torch.tensor([[5.0, 5.0, 1.0, 5.0, 0.0], [0.0, 2.0, 2.0, 2.0, 2.0]])
    exclude = torch.tensor([[0, -1], [1, 2]])
    v, i = topk_excluding(scores.clone(), 2, exclude)
    assert i.tolist() == [[1, 3], [3, 4]]
    assert v.tolist() == [[5.0, 5.0], [2.0, 2.0]]


def test_two_spaces_side_by_side_with_two_threads():
    g = torch.Generator().manual_seed(8)
    a = torch.randn(90, 5, generator=g, dtype=torch.float64)
    b = torch.randn(90, 7, generator=g, dtype=torch.float64)
    torch.set_num_threads(2)
    try:
        res = knn_match_similarity(a, b, k=4, block_size=32)
        assert torch.get_num_threads() == 2          # restored after the side-by-side searches
    finally:
        torch.set_num_threads(1)
    assert torch.allclose(res.per_token, brute_similarity(a, b, 4, "jaccard"))


def test_the_median_and_the_weighted_median_are_the_lower_middle_value():
    """The documented rule: of an even count, the lower of the two middle scores (0.25 of 0, .25, .5, 1;
    not their mean 0.375), the weighted median with equal weights the same."""
    from embinit.analysis.similarity import summarize
    everyone = torch.ones(4, dtype=torch.bool)
    out = summarize(torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=torch.float64), torch.tensor([0, 1, 2, 4]), 4, everyone)
    assert out["median"] == 0.25
    out = summarize(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64), torch.tensor([0, 1, 2, 3]), 4, everyone,
                    torch.ones(4))
    assert out["weighted_median"] == out["median"] == pytest.approx(0.2)


def test_excluded_tokens_leave_the_summary():
    """`exclude` takes tokens out of the aggregates: the mean is the other tokens' scores' mean."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(40, 6, generator=g), torch.randn(40, 6, generator=g)
    every = knn_match_similarity(a, b, k=5)
    drop = torch.zeros(40, dtype=torch.bool)
    drop[:10] = True
    some = knn_match_similarity(a, b, k=5, exclude=drop)
    assert torch.equal(some.per_token, every.per_token) and some.summary["tokens"] == 30
    assert some.summary["mean"] == pytest.approx(float(every.per_token[10:].mean()))
    assert some.summary["mean"] != pytest.approx(every.summary["mean"])
    with pytest.raises(EmbinitError, match="exclude must be a boolean mask of length 40"):
        knn_match_similarity(a, b, k=5, exclude=[True])
