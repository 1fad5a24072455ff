"""The paper's equations: Xavier's bound, standardize (eq. 1), match (eq. 4), shuffle; the order of
operations (statistics from found rows, transform, then OOV rows in the transformed space)."""

import math

import numpy as np
import pytest
import torch

from embinit.init import build_table, xavier_bound, xavier_std
from embinit.init import testing as tt
from embinit.vocab import Vocab

torch.set_num_threads(1)


def _rel(a, b):
    return abs(a - b) / abs(b)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """40 words with a wide, shifted distribution (like GloVe: std ~ 0.7 to 5, mean != 0)."""
    words = [f"w{i}" for i in range(40)]
    vectors = {w: np.round(v * 3.0 + 0.5, 4) for w, v in tt.word_vectors(words, dim=16, seed=5).items()}
    path = tt.write_text(tmp_path_factory.mktemp("src") / "g.txt", vectors)
    return path, vectors


VOCAB = Vocab(["<pad>", "<unk>"] + [f"w{i}" for i in range(30)] + ["oov1", "oov2", "oov3"])
FOUND = slice(2, 32)


def test_xavier_bound_is_the_papers():
    n, d = 5893, 300
    assert xavier_bound(n, d) == math.sqrt(6 / (n + d))
    t = build_table("xavier", Vocab([f"t{i}" for i in range(n)]), dim=d, seed=0).table
    a = math.sqrt(6 / (n + d))
    assert t.abs().max().item() <= a
    assert t.abs().max().item() > 0.999 * a          # a uniform draw of 1.7M values reaches the edge
    assert _rel(t.double().std().item(), a / math.sqrt(3)) < 0.01
    assert abs(t.double().mean().item()) < 0.01 * a


def test_xavier_normal_and_normal_stds():
    vocab = Vocab([f"t{i}" for i in range(2000)])
    xn = build_table("xavier_normal", vocab, dim=100, seed=0).table.double()
    assert _rel(xn.std().item(), xavier_std(2000, 100)) < 0.01
    nm = build_table("normal", vocab, dim=100, seed=0).table.double()
    assert _rel(nm.std().item(), 0.02) < 0.01


def test_standardize_hits_xavier_mean_and_std(source):
    path, vectors = source
    res = build_table("glove+standardize", VOCAB, pretrained=str(path), cache_dir=False, seed=0)
    found = res.table[FOUND].double()
    target = xavier_std(len(VOCAB), 16)
    assert _rel(found.std().item(), target) < 1e-6
    assert abs(found.mean().item()) < 1e-6 * target
    # the analytic sigma_x agrees with the sample std of an actual Xavier table of the same N x D
    big = build_table("xavier", Vocab([f"t{i}" for i in range(3000)]), dim=16, seed=1).table.double()
    assert _rel(big.std().item(), xavier_std(3000, 16)) < 0.01
    # eq. 1 keeps the rows' geometry: the map is affine with one scale for every value
    raw = np.stack([vectors[f"w{i}"] for i in range(30)])
    z = (raw - raw.mean()) / raw.std(ddof=1) * target
    assert np.allclose(found.numpy(), z, atol=1e-6)
    assert res.source_stats["std_p"] == pytest.approx(raw.std(ddof=1), rel=1e-6)
    assert res.source_stats["mean_p"] == pytest.approx(raw.mean(), rel=1e-6)


def test_match_hits_the_sources_mean_and_std(source):
    path, vectors = source
    res = build_table("glove+match", VOCAB, pretrained=str(path), cache_dir=False, seed=0)
    raw = np.stack([vectors[f"w{i}"] for i in range(30)])
    table = res.table.double()
    assert _rel(table.std().item(), raw.std(ddof=1)) < 1e-6
    assert _rel(table.mean().item(), raw.mean()) < 1e-6
    assert res.label == "Xavier_GloVe" and res.oov is None   # every row is rescaled Xavier
    # no pretrained row survives: the table is a rescaled uniform draw, not the source's values
    assert not np.isin(res.table[FOUND].numpy(), raw.astype(np.float32)).any()


def test_shuffle_preserves_values_and_permutes_rows_and_columns(source):
    path, vectors = source
    res = build_table("glove+shuffle", VOCAB, pretrained=str(path), cache_dir=False, seed=0)
    raw = torch.tensor(np.stack([vectors[f"w{i}"] for i in range(30)]), dtype=torch.float32)
    found = res.table[FOUND]
    assert torch.equal(found.flatten().sort().values, raw.flatten().sort().values)
    assert not torch.equal(found, raw)
    # a row and column permutation: each shuffled row is some source row with permuted columns
    raw_rows = {tuple(sorted(r.tolist())) for r in raw}
    assert all(tuple(sorted(r.tolist())) in raw_rows for r in found)
    col_sums = sorted(raw.sum(0).tolist())
    assert np.allclose(sorted(found.sum(0).tolist()), col_sums, atol=1e-4)
    # the columns are permuted too (sorted rows and column sums hold without it): each shuffled column is
    # a source column, the permutation Q read from the columns' values; the identity has chance 1/16!
    columns = {tuple(sorted(raw[:, j].tolist())): j for j in range(raw.shape[1])}
    q = [columns[tuple(sorted(found[:, j].tolist()))] for j in range(found.shape[1])]
    assert sorted(q) == list(range(16)) and q != list(range(16))
    again = build_table("glove+shuffle", VOCAB, pretrained=str(path), cache_dir=False, seed=0).table
    assert torch.equal(again, res.table)


OOV_WORDS = ["cats", "dogs", "mats", "runs", "plays", "running", "played", "sats", "ons", "thes"]


def _shuffled_with_subword_rows(folder, seed):
    """A shuffled BERT table whose 10 missing words take subword means; the column permutation q (read
    from the found row of "the") and the true piece means of the missing words, columns permuted by q."""
    pieces, weight = tt.bert_rows(folder)
    vocab = Vocab(["the", "cat", "dog", "on", "mat", "run", "play", "sat", "a"] + OOV_WORDS)
    res = build_table("bert+shuffle", vocab, pretrained=str(folder), oov="subword_mean", cache_dir=False,
                      seed=seed)
    row = res.table[0]
    source_row = next(weight[pieces[w]] for w in vocab.tokens[:9]
                      if sorted(weight[pieces[w]].tolist()) == sorted(row.tolist()))
    q = [int((source_row == v).nonzero()[0]) for v in row]   # the shuffled row = source_row[q]
    assert sorted(q) == list(range(8)) and q != list(range(8))
    tok = {"cats": ["cat", "##s"], "dogs": ["dog", "##s"], "mats": ["mat", "##s"], "runs": ["run", "##s"],
           "plays": ["play", "##s"], "running": ["run", "##ning"], "played": ["play", "##ed"],
           "sats": ["sat", "##s"], "ons": ["on", "##s"], "thes": ["the", "##s"]}
    means = torch.stack([weight[[pieces[p] for p in tok[w]]].double().mean(0).float()[q] for w in OOV_WORDS])
    return res, means


def test_shuffle_moves_subword_piece_means_to_other_missing_tokens(tmp_path):
    """A shuffled table's `subword_mean` rows carry no token's own meaning: the missing words' piece means
    are permuted among themselves (as the found rows are) and by the same columns. Before, each kept its
    own mean with only the columns permuted (cosine 1 with its true mean, a leak into a shuffled table)."""
    folder = tt.write_tiny_bert(tmp_path / "bert", dim=8)
    for seed in (0, 1, 2):
        res, means = _shuffled_with_subword_rows(folder, seed)
        oov = res.table[9:]
        assert res.oov_rows.tolist() == list(range(9, 19))
        # the same set of rows (the values of the shuffled space) ...
        taken = [next(j for j in range(10) if torch.allclose(r, means[j], atol=1e-6)) for r in oov]
        assert sorted(taken) == list(range(10))
        # ... but moved: few missing words keep their own mean (a random permutation of 10 fixes ~1)
        assert sum(t == i for i, t in enumerate(taken)) <= 3, taken
    again, _ = _shuffled_with_subword_rows(folder, 0)
    assert torch.equal(again.table, _shuffled_with_subword_rows(folder, 0)[0].table)   # seeded


def test_shuffle_leaves_the_other_oov_rules_draws_unchanged(tmp_path):
    """The piece means' permutation is seeded from the shuffle's own draw, not from the build's generator:
    a shuffled table with Xavier fill rows is what it was (its trials' keys are unchanged)."""
    folder = tt.write_tiny_bert(tmp_path / "bert", dim=8)
    vocab = Vocab(["the", "cat", "dog"] + OOV_WORDS)
    res = build_table("bert+shuffle", vocab, pretrained=str(folder), oov="xavier", cache_dir=False, seed=4)
    g = torch.Generator().manual_seed(4)
    torch.randperm(3, generator=g), torch.randperm(8, generator=g)   # the shuffle's two permutations
    a = xavier_bound(len(vocab), 8)
    expected = torch.empty(10, 8).uniform_(-a, a, generator=g)
    assert torch.equal(res.table[3:], expected)


def test_shuffle_elements_mixes_values_across_rows(source):
    """The paper's Finding 3 wording ("the elements"): one permutation of all n x D values. The values'
    multiset is kept, but rows are broken up: almost no shuffled row is a permutation of a source row."""
    path, vectors = source
    res = build_table("glove+shuffle_elements", VOCAB, pretrained=str(path), cache_dir=False, seed=0)
    assert res.label == "GloVe_ShuffledElements"
    raw = torch.tensor(np.stack([vectors[f"w{i}"] for i in range(30)]), dtype=torch.float32)
    found = res.table[FOUND]
    assert torch.equal(found.flatten().sort().values, raw.flatten().sort().values)
    raw_rows = {tuple(sorted(r.tolist())) for r in raw}
    assert sum(tuple(sorted(r.tolist())) in raw_rows for r in found) <= 1   # row+column shuffle: all 30
    again = build_table("glove+shuffle_elements", VOCAB, pretrained=str(path), cache_dir=False, seed=0).table
    assert torch.equal(again, res.table)
    other = build_table("glove+shuffle_elements", VOCAB, pretrained=str(path), cache_dir=False, seed=1).table
    assert not torch.equal(other[FOUND], found)


def test_oov_rows_are_filled_in_the_transformed_space(source):
    path, _ = source
    res = build_table("glove+standardize", VOCAB, pretrained=str(path), oov="mean", cache_dir=False)
    found = res.table[FOUND].double()
    for i in (0, 1, 32, 33, 34):
        assert torch.allclose(res.table[i].double(), found.mean(0), atol=1e-7)
    xav = build_table("glove+standardize", VOCAB, pretrained=str(path), oov="xavier", cache_dir=False)
    a = xavier_bound(len(VOCAB), 16)
    assert xav.table[[0, 1, 32, 33, 34]].abs().max().item() <= a
    zeros = build_table("glove+standardize", VOCAB, pretrained=str(path), oov="zeros", cache_dir=False)
    assert zeros.table[[0, 1, 32, 33, 34]].abs().sum().item() == 0


def test_mean_cov_samples_the_found_rows_distribution(source):
    path, _ = source
    vocab = Vocab([f"w{i}" for i in range(40)] + [f"oov{i}" for i in range(4000)])
    res = build_table("glove", vocab, pretrained=str(path), oov="mean_cov", cache_dir=False, seed=0)
    found, fill = res.table[:40].double(), res.table[40:].double()
    assert (fill.mean(0) - found.mean(0)).abs().max().item() < 0.25   # 3 sigma/sqrt(4000) ~ 0.15
    cov_found = torch.cov(found.T)
    cov_fill = torch.cov(fill.T)
    assert (cov_fill - cov_found).abs().max().item() < 0.1 * cov_found.diagonal().max().item() + 0.5


def test_mean_cov_fills_with_the_covariance_not_the_second_moment(tmp_path):
    """Rows far from 0 (mean 5, σ 1): the fill's per-column variance is the found rows' (the standard
    error of the ratio with 20,000 draws is ~1%); the uncentered second moment would give 1 + 5² = 26."""
    words = [f"w{i}" for i in range(200)]
    vectors = {w: np.round(v + 5.0, 5) for w, v in tt.word_vectors(words, dim=4, seed=1).items()}
    path = tt.write_text(tmp_path / "g.txt", vectors)
    vocab = Vocab(words + [f"oov{i}" for i in range(20000)])
    table = build_table("glove", vocab, pretrained=str(path), oov="mean_cov", cache_dir=False, seed=0).table.double()
    ratio = table[200:].var(0) / table[:200].var(0)
    assert ((ratio - 1).abs() < 0.1).all(), ratio


def test_raw_source_keeps_xavier_oov_rows_as_in_the_paper(source):
    path, vectors = source
    res = build_table("glove", VOCAB, pretrained=str(path), cache_dir=False)
    assert torch.equal(res.table[2], torch.tensor(vectors["w0"], dtype=torch.float32))
    assert res.table[[0, 1, 32]].abs().max().item() <= xavier_bound(len(VOCAB), 16)


def test_only_shuffled_tables_with_subword_rows_change_trial_keys():
    """Those trials' tables changed (their missing rows kept their own piece means before): their keys carry
    `shuffle_subword`; every other key is as before."""
    from embinit.config import TrialConfig

    def marked(**kw):
        return "shuffle_subword" in TrialConfig(**{"task": "synthetic_translation", **kw}).key_fields()

    assert marked(init="bert+shuffle", oov="subword_mean")
    assert marked(init="bert+standardize+shuffle", oov="subword_mean")
    assert marked(init="xavier", src_init="mbert+shuffle", oov="subword_mean")
    assert not marked(init="bert+shuffle")                                   # xavier fill rows: as before
    assert not marked(init="bert+shuffle", oov="mean")
    assert not marked(init="bert+shuffle_elements", oov="subword_mean")      # mapped through its pool already
    assert not marked(init="bert+standardize", oov="subword_mean")
    assert not marked(init="bert+shufle", oov="subword_mean")                # invalid: refused elsewhere
    # a one-sided task has no source table: its src_init builds nothing
    assert not marked(task="synthetic_lm", init="bert", src_init="bert+shuffle", oov="subword_mean")
