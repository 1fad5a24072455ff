"""The KNN-similarity post's two switches: one data order shared by two seeds (`data_seed`), and a
trained body with fresh embeddings (`init_from`)."""

import pytest
import torch

import embinit.train.trial as trial_mod
from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.models import embedding_parameters
from embinit.train import run_trial

ORIGINAL_TRAIN_EPOCH = trial_mod.train_epoch
TINY = dict(task="synthetic_lm", epochs=1, max_train_examples=64, threads=1)


def _plain(x):
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in sorted(x.items())}
    return x


def _batches_seen(monkeypatch, cfg, tmp_path):
    seen = []
    original = ORIGINAL_TRAIN_EPOCH

    def recording(model, batches, *args, **kwargs):
        seen.append(_plain(list(batches)))
        return original(model, batches, *args, **kwargs)

    monkeypatch.setattr(trial_mod, "train_epoch", recording)
    run_trial(cfg, out_dir=tmp_path, cache_dir=False)
    return seen


def test_data_seed_gives_two_seeds_one_data_order(monkeypatch, tmp_path):
    a = _batches_seen(monkeypatch, TrialConfig(seed=0, data_seed=5, **TINY), tmp_path / "a")
    b = _batches_seen(monkeypatch, TrialConfig(seed=1, data_seed=5, **TINY), tmp_path / "b")
    c = _batches_seen(monkeypatch, TrialConfig(seed=1, **TINY), tmp_path / "c")
    assert a == b
    assert a != c


def test_data_seed_is_in_the_key_only_when_set():
    assert TrialConfig(seed=1, data_seed=5, **TINY).key() != TrialConfig(seed=1, **TINY).key()
    plain = TrialConfig(seed=1, **TINY).to_dict()
    plain.pop("data_seed"), plain.pop("init_from")
    assert TrialConfig(**plain).key() == TrialConfig(seed=1, **TINY).key()


def _split(state, model_names):
    emb = {k: v for k, v in state.items() if k in model_names}
    body = {k: v for k, v in state.items() if k not in model_names}
    return emb, body


@pytest.mark.slow
def test_init_from_loads_the_body_and_keeps_fresh_embeddings(tmp_path):
    first = run_trial(TrialConfig(seed=0, **TINY), out_dir=tmp_path / "first", cache_dir=False)
    best = tmp_path / "first" / "best.pt"
    assert first.status == "finished" and best.is_file()
    run_trial(TrialConfig(seed=3, init_from=str(best), freeze_non_embeddings=True, **TINY),
                       out_dir=tmp_path / "second", cache_dir=False)
    a = torch.load(best, weights_only=False)
    b = torch.load(tmp_path / "second" / "best.pt", weights_only=False)
    # which state-dict entries are embeddings: ask a model built the same way
    from embinit.train.prepare import prepare
    setup = prepare(TrialConfig(seed=3, **TINY).resolved(), cache_dir=False)
    ids = {id(p) for p in embedding_parameters(setup.model)}
    emb_names = {n for n, p in setup.model.named_parameters() if id(p) in ids}
    assert emb_names
    emb_a, body_a = _split(a["model"], emb_names)
    emb_b, body_b = _split(b["model"], emb_names)
    assert body_a.keys() == body_b.keys()
    for k in body_a:  # frozen and loaded: the body is the first model's, bit for bit
        assert torch.equal(body_a[k], body_b[k]), k
    assert any(not torch.equal(emb_a[k], emb_b[k]) for k in emb_a)


def test_init_from_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(EmbinitError, match="init_from checkpoint not found"):
        run_trial(TrialConfig(init_from=str(tmp_path / "nope.pt"), **TINY), out_dir=tmp_path / "x",
                  cache_dir=False)


def test_one_seed_is_one_data_order_across_inits(monkeypatch, tmp_path):
    """The reproduction pairs trials by seed across inits (paired t): that needs the same batches in the
    same order whatever the init, which holds because the order derives from the seed alone."""
    a = _batches_seen(monkeypatch, TrialConfig(seed=2, init="xavier", **TINY), tmp_path / "a")
    b = _batches_seen(monkeypatch, TrialConfig(seed=2, init="normal", **TINY), tmp_path / "b")
    assert a == b
