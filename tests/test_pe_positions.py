"""The position count is a stated setting (`pe_positions`, issue 23 item 3): the model's encoding table
and the statistics use it, and its default is the paper's 5,000, which reproduces Table 6's PE row."""

import dataclasses
import hashlib
import json

import pytest
import torch
from torch import nn

from embinit import paper
from embinit.config import CODE_VERSION, TrialConfig
from embinit.errors import EmbinitError
from embinit.train.prepare import prepare
from embinit.train.lifecycle import emb_stats

TINY = dict(task="synthetic_lm", epochs=1, max_train_examples=32, threads=1, d_model=16, heads=2, ff_dim=16)


class OneTable(nn.Module):
    def __init__(self, table):
        super().__init__()
        self.emb = nn.Embedding.from_pretrained(table)

    def embeddings(self):
        return {"tok": self.emb}


def test_a_trials_statistics_reproduce_table_6s_position_encoding_row():
    """Table 6 (D = 300): PE min -1, max 1, mean 0.131, from the default position count."""
    table = torch.randn(50, 300, generator=torch.Generator().manual_seed(0)) * 0.016
    st = emb_stats(OneTable(table), TrialConfig(task="multi30k").resolved())
    p_min, p_max, p_mean, _ = paper.TABLE6["Pos. Enc."]
    assert round(st["emb/pe_min"], 3) == p_min and round(st["emb/pe_max"], 3) == p_max
    assert round(st["emb/pe_mean"], 3) == p_mean
    # Table 6 prints σ 0.67; Vaswani's table of 5,000 x 300 has 0.695 (no row count gives both the
    # paper's mean and its σ: at 1,000 rows σ is 0.669 but the mean 0.229). Stated, not hidden:
    assert round(st["emb/pe_std"], 3) == 0.695 == round(float(_vaswani(5000, 300).std()), 3)
    assert st["emb/absorption"] == pytest.approx(st["emb/scaled_std"] / st["emb/pe_std"])


def test_the_setting_moves_the_statistics():
    table = torch.randn(50, 300, generator=torch.Generator().manual_seed(0))
    short = emb_stats(OneTable(table), TrialConfig(task="multi30k", pe_positions=512).resolved())
    # 512 positions: the mean the paper's 0.131 rules out
    assert round(short["emb/pe_mean"], 3) == 0.267 == round(float(_vaswani(512, 300).mean()), 3)


def _vaswani(length: int, dim: int, base: float = 10000.0):
    """The sinusoidal table written out from Vaswani et al. with numpy, not from embinit.posenc."""
    import numpy as np
    angle = np.arange(length)[:, None] / base ** (np.arange(0, dim, 2) / dim)
    pe = np.empty((length, dim))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angle), np.cos(angle)
    return pe


def test_the_models_encoding_table_has_the_stated_rows_and_still_bounds_sequences():
    model = prepare(TrialConfig(**TINY, pe_positions=3000), cache_dir=False).model
    emb = model.embeddings()["tok"]
    layer = next(m for m in model.modules() if getattr(m, "embedding", None) is emb)
    assert layer.pe.shape[0] == 3000
    assert layer.max_positions == 2 * TrialConfig(**TINY).resolved().max_len + 2
    with pytest.raises(EmbinitError, match="exceeds the model's max_positions"):
        layer(torch.ones(1, layer.max_positions + 1, dtype=torch.long))
    # fewer rows than the sequences need: the table still covers them
    small = prepare(TrialConfig(**TINY, pe_positions=4), cache_dir=False).model
    lay = next(m for m in small.modules() if hasattr(m, "max_positions") and hasattr(m, "pe"))
    assert lay.pe.shape[0] == lay.max_positions


def test_bad_position_counts_are_refused():
    with pytest.raises(EmbinitError, match="pe_positions must be >= 1, got 0"):
        prepare(TrialConfig(**TINY, pe_positions=0), cache_dir=False)


def _key_without(cfg: TrialConfig, *names: str) -> str:
    """A trial key computed as before the named fields existed (their defaults leave keys alone)."""
    d = cfg.resolved().to_dict()
    for name in ("threads", "device", "data_seed", "init_from", "tie_embeddings", *names):
        d.pop(name, None)
    d["code_version"] = CODE_VERSION
    return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()[:16]


def test_the_default_changes_trial_keys_and_512_reaches_the_old_ones():
    cfg = TrialConfig(task="multi30k", seed=1)
    legacy = dataclasses.replace(cfg, pe_positions=512)
    assert legacy.key() == _key_without(cfg, "pe_positions", "emb_seed", "cuda_graphs", "task_def", "data_revision",
                                        "length_penalty", "attention_dropout", "activation_dropout")
    assert cfg.key() != legacy.key()
