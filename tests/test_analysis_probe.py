import pytest
import torch

from embinit.analysis.probe import probe_checkpoint, probe_init, probe_table
from embinit.errors import EmbinitError
from embinit.init import xavier_std
from embinit.vocab import Vocab

torch.set_num_threads(1)
N, D = 600, 32


def table(std: float, seed: int = 0) -> torch.Tensor:
    return torch.randn(N, D, generator=torch.Generator().manual_seed(seed)) * std


def test_separates_strong_position_signal_from_drowned():
    small = probe_table(table(xavier_std(N, D)), n_samples=3000)    # scaled std ~0.3 vs PE ~0.6
    wide = probe_table(table(5.0), n_samples=3000)                   # GloVe-like after scaling: ~28
    assert small["probe/pos_acc"] > 0.9 and small["probe/pos_r2"] > 0.8
    assert wide["probe/pos_acc"] < 5 * wide["probe/pos_chance"] and wide["probe/pos_r2"] < 0.2
    # the other direction of Finding 2: wide rows keep their identity, small ones lose some of it
    assert wide["probe/token_acc"] == 1.0
    assert small["probe/token_acc"] < wide["probe/token_acc"]
    assert small["probe/absorption"] < 1 < wide["probe/absorption"]
    assert wide["probe/emb_scaled_std"] == pytest.approx(5.0 * D ** 0.5, rel=0.05)


def test_a_huge_table_keeps_its_identity():
    """Rows beyond ~1e19 (a diverging trial's, or a `+rescale=1e20` init): a float32 norm of such a row was
    inf, every key became 0 and token_acc fell to chance; identity holds up to float32's largest values."""
    for std in (1e20, 1e30, 1e37):
        assert probe_table(table(std), n_samples=1000)["probe/token_acc"] == 1.0, std


def test_seeded_and_namespaced():
    a = probe_table(table(0.1), n_samples=500, seed=3)
    b = probe_table(table(0.1), n_samples=500, seed=3)
    assert a == b
    assert all(k.startswith("probe/") for k in a)
    c = probe_table(table(0.1), n_samples=500, seed=4, prefix="probe_init")
    assert set(c) == {k.replace("probe/", "probe_init/") for k in a}


def test_input_errors():
    with pytest.raises(EmbinitError, match="at least 2 rows"):
        probe_table(torch.zeros(1, 4))
    bad = table(1.0)
    bad[0, 0] = float("inf")
    with pytest.raises(EmbinitError, match="NaN or infinite"):
        probe_table(bad)
    with pytest.raises(EmbinitError, match="max_len must be at least 2"):
        probe_table(table(1.0), max_len=1)
    with pytest.raises(EmbinitError, match="test_frac"):
        probe_table(table(1.0), test_frac=1.0)


def test_probe_init_and_checkpoint(tmp_path):
    vocab = Vocab([f"w{i}" for i in range(N)])
    before = probe_init("xavier", vocab, dim=D, seed=0, n_samples=800)
    assert before["probe/pos_acc"] > 0.9
    # an absorption target is set against the probe's own PE table (its positions and base)
    target = probe_init("xavier+rescale=absorption:0.5", vocab, dim=D, seed=0, n_samples=200, max_len=16,
                        pe_base=500.0)
    assert target["probe/absorption"] == pytest.approx(0.5, abs=1e-6)
    ckpt = tmp_path / "best.pt"
    torch.save({"embeddings": {"tok": table(5.0)}, "vocabs": {"tok": vocab.tokens},
                "config": {"pe_base": 10000.0}}, ckpt)
    after = probe_checkpoint(ckpt, n_samples=800)
    assert after["probe/pos_acc"] < 0.2
    with pytest.raises(EmbinitError, match="'tgt' is not a table"):
        probe_checkpoint(ckpt, key="tgt")
