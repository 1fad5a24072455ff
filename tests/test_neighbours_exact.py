"""Exact neighbours (issue 23 item 2): `knn` on float32 tables equals float64 brute force, also where
neighbours are closer than float32 can tell apart; only true ties (equal scores) go to the lower index."""

import pytest
import torch

from embinit.analysis.neighbours import knn
from embinit.analysis.similarity import knn_match_similarity

torch.set_num_threads(1)


def near_tie_table(neighbours: str = "dot", n_noise=260, d=16, clusters=((0, 30), (30, 12)), seed=0):
    """float32 rows; in each cluster every row is one base vector with 3 components moved a little, so
    its neighbours' scores differ below float32's rounding of a 16-term dot product and far above
    float64's: by 1-3 ulps for inner products (~1e-6 relative), by ~1e-4 relative for cosines (whose
    differences then are ~1e-9; ulp moves would leave cosines 1e-14 apart, float64's own noise).
    Rows 42 and 43 repeat row 44 exactly (true ties)."""
    g = torch.Generator().manual_seed(seed)
    top = max(c[0] + c[1] for c in clusters)
    x = torch.randn(top + 3 + n_noise, d, generator=g)
    for start, size in clusters:
        base = torch.randn(d, generator=g) * 3
        for r in range(start, start + size):
            row = base.clone()
            for c in torch.randint(0, d, (3,), generator=g).tolist():
                if neighbours == "cosine":
                    row[c] = row[c] * (1 + 1e-4 * float(torch.randn(1, generator=g)))
                    continue
                up = torch.tensor(float("inf") if torch.rand(1, generator=g) < 0.5 else float("-inf"))
                for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
                    row[c] = torch.nextafter(row[c], up)
            x[r] = row
    x[top] = x[top + 1] = x[top + 2]
    return x


def brute64(x: torch.Tensor, k: int, neighbours: str = "dot") -> torch.Tensor:
    """Float64 scores, row by row with one reduction order (products of float32 values are exact in
    float64, so equal rows give bit-equal scores), ranked by a stable sort: equal scores, lower index."""
    x = x.double()
    if neighbours == "cosine":
        x = x / x.norm(dim=1, keepdim=True)
    out = []
    for i in range(x.shape[0]):
        s = (x[i] * x).sum(dim=1)
        s[i] = float("-inf")
        out.append(torch.sort(-s, stable=True).indices[:k])
    return torch.stack(out)


@pytest.mark.parametrize("neighbours", ["dot", "cosine"])
@pytest.mark.parametrize("k,block", [(10, 64), (10, 301), (3, 17), (25, 50)])
def test_float32_knn_equals_float64_brute_force_with_planted_near_ties(neighbours, k, block):
    x = near_tie_table(neighbours)
    assert x.dtype == torch.float32
    ref = brute64(x, k, neighbours)
    _, idx = knn(x, k, neighbours, block_size=block)
    wrong = (idx != ref).any(dim=1).nonzero().flatten().tolist()
    assert not wrong, f"rows whose neighbours differ from float64 brute force: {wrong[:10]}"


@pytest.mark.parametrize("neighbours", ["dot", "cosine"])
def test_the_near_ties_are_real_float32_cannot_order_them(neighbours):
    """The planted scores are closer than float32's rounding: ranking them in float32 disagrees with
    float64 on some rows, so the test above checks something."""
    x = near_tie_table(neighbours)
    y = x / x.norm(dim=1, keepdim=True) if neighbours == "cosine" else x
    s32 = y @ y.T
    s32.fill_diagonal_(float("-inf"))
    f32 = torch.sort(-s32, stable=True).indices[:, :10]
    assert (f32[:42] != brute64(x, 10, neighbours)[:42]).any(dim=1).sum() >= 5


def test_true_ties_go_to_the_lower_index():
    x = near_tie_table("cosine")
    _, idx = knn(x, 2, "cosine", block_size=32)
    assert idx[44].tolist() == [42, 43] and idx[42].tolist() == [43, 44]


def test_similarity_of_a_table_with_itself_perturbed_below_float32_noise():
    """Two copies that float32 cannot tell apart in score order but float64 can: the similarity is the
    float64 one (here both copies are the same table, so 1.0 exactly, whatever the block shape)."""
    x = near_tie_table()
    res = knn_match_similarity(x, x.clone(), k=10, block_size=40)
    assert torch.all(res.per_token == 1.0)


def test_cosine_similarity_is_float64_exact_too():
    """knn_match_similarity searches cosine neighbours from the original rows (not float32-normalized
    copies), so its neighbour lists are float64 brute force's."""
    x = near_tie_table("cosine")
    y = near_tie_table("cosine", seed=1)
    res = knn_match_similarity(x, y, k=10, neighbours="cosine", block_size=64)
    r1, r2 = brute64(x, 10, "cosine"), brute64(y, 10, "cosine")
    inter = torch.tensor([len(set(a) & set(b)) for a, b in zip(r1.tolist(), r2.tolist())])
    assert torch.equal(res.intersections, inter)


def test_cosine_neighbours_of_small_rows_of_varied_norms_are_exact():
    """Xavier-scale rows (~0.01) of norms spread over orders of magnitude: the cosine neighbours are the
    float64 brute force's on the normalized rows (a first pass on unnormalized rows got all 300 wrong)."""
    import math
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 8, generator=g) * torch.exp(torch.randn(300, 1, generator=g)) * 0.01
    _, idx = knn(x, 5, "cosine")
    xn = (x / x.norm(dim=1, keepdim=True)).double()
    sims = xn @ xn.T
    sims.fill_diagonal_(-math.inf)
    assert torch.equal(idx, sims.topk(5, dim=1).indices)


@pytest.mark.parametrize("scale", [1e20, 1e-25])
def test_cosine_neighbours_of_rows_beyond_float32_norms_are_exact(scale):
    """Rows whose float32 norm overflows (beyond ~1e19: inf) or underflows (below ~1e-19: 0), as in a
    diverging trial's still-finite table: the cosine neighbours are still float64 brute force's (the
    first pass had made such rows 0, so a row's near-twin among them was never its candidate)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 16, generator=g)
    x[100:] = x[:100] + 0.01 * torch.randn(100, 16, generator=g)   # row i's nearest is its twin i + 100
    x[100:] *= scale
    _, idx = knn(x, 5, "cosine", block_size=64)
    assert torch.equal(idx, brute64(x, 5, "cosine"))
    assert idx[:100, 0].tolist() == list(range(100, 200))
