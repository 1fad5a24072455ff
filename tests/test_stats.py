"""embedding_stats: the paper's Table 2/6 statistics, position-encoding comparison, stable keys."""

import math

import numpy as np
import pytest
import torch

from embinit.errors import EmbinitError
from embinit.stats import embedding_stats

KEYS = ["rows", "dim", "min", "max", "mean", "std", "scaled_min", "scaled_max", "scaled_mean", "scaled_std",
        "pe_min", "pe_max", "pe_mean", "pe_std", "absorption", "row_norm_mean", "row_norm_std"]


def _pe_numpy(length, dim, base):
    """The encoding written out from Vaswani et al. independently of embinit.posenc."""
    pe = np.zeros((length, dim))
    for pos in range(length):
        for i in range(0, dim, 2):
            angle = pos / base ** (i / dim)
            pe[pos, i] = math.sin(angle)
            if i + 1 < dim:
                pe[pos, i + 1] = math.cos(angle)
    return pe


def test_values_match_a_direct_computation():
    g = torch.Generator().manual_seed(0)
    table = torch.randn(50, 10, generator=g) * 3 + 1
    s = embedding_stats(table, pe_length=64, pe_base=100.0)
    assert list(s) == [f"emb/{k}" for k in KEYS]
    x = table.double().numpy()
    assert s["emb/rows"] == 50 and s["emb/dim"] == 10
    assert s["emb/min"] == pytest.approx(x.min()) and s["emb/max"] == pytest.approx(x.max())
    assert s["emb/mean"] == pytest.approx(x.mean()) and s["emb/std"] == pytest.approx(x.std(ddof=1))
    assert s["emb/scaled_std"] == pytest.approx(x.std(ddof=1) * math.sqrt(10))
    assert s["emb/scaled_min"] == pytest.approx(x.min() * math.sqrt(10))
    pe = _pe_numpy(64, 10, 100.0)
    assert s["emb/pe_std"] == pytest.approx(pe.std(ddof=1)) and s["emb/pe_mean"] == pytest.approx(pe.mean())
    assert s["emb/pe_min"] == pytest.approx(pe.min()) and s["emb/pe_max"] == pytest.approx(pe.max())
    assert s["emb/absorption"] == pytest.approx(x.std(ddof=1) * math.sqrt(10) / pe.std(ddof=1))
    norms = np.linalg.norm(x, axis=1)
    assert s["emb/row_norm_mean"] == pytest.approx(norms.mean())
    assert s["emb/row_norm_std"] == pytest.approx(norms.std(ddof=1))


def test_coverage_and_prefix():
    table = torch.ones(4, 2)
    cov = {"rows_found": 3, "rows_total": 4, "row_share": 0.75, "token_share": 0.9}
    s = embedding_stats(table, coverage=cov, prefix="init/tgt/")
    assert s["init/tgt/coverage_rows_found"] == 3.0
    assert s["init/tgt/coverage_row_share"] == 0.75 and s["init/tgt/coverage_token_share"] == 0.9
    assert s["init/tgt/std"] == 0.0
    assert all(k.startswith("init/tgt/") and isinstance(v, float) for k, v in s.items())
    no_counts = embedding_stats(table, coverage={"rows_found": 3, "row_share": 0.75})
    assert "emb/coverage_token_share" not in no_counts


def test_absorption_grows_with_the_embedding_scale():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(100, 16, generator=g)
    small = embedding_stats(base * 0.01)["emb/absorption"]
    large = embedding_stats(base * 10)["emb/absorption"]
    assert large == pytest.approx(small * 1000, rel=1e-6)


@pytest.mark.parametrize("bad", [torch.zeros(3), torch.zeros(0, 4)])
def test_rejects_non_tables(bad):
    with pytest.raises(EmbinitError):
        embedding_stats(bad)
