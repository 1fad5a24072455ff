"""The KNN post's experiment 2 with a GPT-2-style model: `tie_embeddings` makes the LM's output layer the
token table itself (logits = h @ E^T + b). Untied stays the default and keeps earlier trial keys."""

import pytest
import torch

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.models import ModelConfig, build_model, embedding_parameters, set_trainable
from embinit.train import run_trial
from embinit.train.prepare import check_config

torch.set_num_threads(1)
TINY = dict(task="synthetic_lm", epochs=1, max_train_examples=64, threads=1)


def _lm(tie: bool):
    cfg = ModelConfig(d_model=8, heads=2, layers=1, ff_dim=16, max_positions=32, tie_embeddings=tie)
    table = torch.randn(12, 8, generator=torch.Generator().manual_seed(0))
    return build_model("lm", {"tok": table}, cfg, generator=torch.Generator().manual_seed(1))


def test_tied_lm_projects_with_the_token_table():
    tied, untied = _lm(True), _lm(False)
    n_tied = sum(p.numel() for p in tied.parameters())
    n_untied = sum(p.numel() for p in untied.parameters())
    assert n_untied - n_tied == 12 * 8 and "output.weight" not in tied.state_dict()
    ids = torch.randint(0, 12, (2, 5), generator=torch.Generator().manual_seed(2))
    tied.eval()
    h = tied.hidden(ids, causal=True)
    assert torch.allclose(tied(ids), h @ tied.embed.embedding.weight.T + tied.output.bias)
    # the output softmax reaches the table: a token never given as input still gets a gradient
    tied.train()
    tied(ids[:, :1].clamp(max=3)).logsumexp(-1).sum().backward()
    assert tied.embed.embedding.weight.grad[11].abs().sum() > 0


def test_freezing_the_body_keeps_the_tied_table_trainable():
    m = _lm(True)
    set_trainable(m, freeze_non_embeddings=True)
    trainable = [p for p in m.parameters() if p.requires_grad]
    assert len(trainable) == 1 and trainable[0] is embedding_parameters(m)[0]


def test_tie_is_in_the_trial_key_only_when_set():
    plain = TrialConfig(seed=1, **TINY)
    assert TrialConfig(seed=1, tie_embeddings=True, **TINY).key() != plain.key()
    as_before = plain.to_dict()
    as_before.pop("tie_embeddings")   # a config written before the field existed: the same key
    assert TrialConfig(**as_before).key() == plain.key()


def test_tie_is_refused_outside_language_models():
    with pytest.raises(EmbinitError, match="tie_embeddings applies to language models only"):
        check_config(TrialConfig(task="synthetic_translation", tie_embeddings=True))


def test_tied_trial_trains_and_its_body_restarts_experiment_2(tmp_path):
    first = run_trial(TrialConfig(seed=0, tie_embeddings=True, **TINY), out_dir=tmp_path / "a", cache_dir=False)
    assert first.status == "finished"
    best = tmp_path / "a" / "best.pt"
    second = run_trial(TrialConfig(seed=3, tie_embeddings=True, init_from=str(best), freeze_non_embeddings=True,
                                   **TINY), out_dir=tmp_path / "b", cache_dir=False)
    assert second.status == "finished"
    a = torch.load(best, weights_only=False)["model"]
    b = torch.load(tmp_path / "b" / "best.pt", weights_only=False)["model"]
    assert torch.equal(a["output.bias"], b["output.bias"])                     # body: loaded and frozen
    assert not torch.equal(a["embed.embedding.weight"], b["embed.embedding.weight"])   # table: fresh
    with pytest.raises(EmbinitError, match="does not fit this model"):           # an untied body does not fit
        run_trial(TrialConfig(seed=3, init_from=str(best), **TINY), out_dir=tmp_path / "c", cache_dir=False)
