"""Dropout placement (`attention_dropout`, `activation_dropout`): torch.nn.Transformer's and fairseq's two
extra dropout sites, off by default (the paper's model, exactly), on the softmaxed weights of every
attention and after the feed-forward activation when set; in the trial key only when set; checked by the
spec, `embinit train` and the trainer as every other rate is."""

import pytest
import torch

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.models import FastDropout, ModelConfig, build_model, set_dropout_generator
from embinit.models import layers
from embinit.spec import SpecError, load_spec

torch.set_num_threads(1)
D = 16
KINDS = ("translation", "classification", "lm")


def model(kind, **kw):
    cfg = ModelConfig(**{"d_model": D, "heads": 4, "layers": 2, "ff_dim": 32, "max_positions": 64, **kw})
    g = torch.Generator().manual_seed(0)
    t = {"src": torch.randn(20, D, generator=g), "tgt": torch.randn(24, D, generator=g),
         "tok": torch.randn(24, D, generator=g)}
    t = {k: t[k] for k in (("src", "tgt") if kind == "translation" else ("tok",))}
    return build_model(kind, t, cfg, num_labels=3, generator=torch.Generator().manual_seed(1))


def inputs(kind):
    g = torch.Generator().manual_seed(2)
    src = torch.randint(4, 20, (3, 7), generator=g)
    src[0, 5:] = 0   # padding: the key mask is on
    return (src, torch.randint(4, 24, (3, 5), generator=g)) if kind == "translation" else (src,)


def forward(m, kind, seed):
    set_dropout_generator(m, torch.Generator().manual_seed(seed))
    return m(*inputs(kind))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("site", ["attention_dropout", "activation_dropout"])
def test_each_site_drops_in_training_only(kind, site):
    """With residual dropout off, only the new site can make two training passes differ; in eval mode
    the model is the one without it (the same weights)."""
    on, off = model(kind, dropout=0.0, **{site: 0.3}), model(kind, dropout=0.0)
    on.train()
    a, b = forward(on, kind, 0), forward(on, kind, 1)
    assert not torch.equal(a, b)
    assert torch.equal(a, forward(on, kind, 0))   # the trial's generator fixes the masks
    on.eval(), off.eval()
    assert torch.equal(forward(on, kind, 0), forward(on, kind, 1))
    assert torch.equal(forward(on, kind, 0), forward(off, kind, 0))


@pytest.mark.parametrize("kind", KINDS)
def test_at_zero_no_new_draw_and_attention_keeps_its_kernel(kind, monkeypatch):
    """At the default the model computes what it computed before (tests/test_code_version.py pins whole
    trials): scaled_dot_product_attention as before, and the dropout generator draws exactly the masks it
    drew before (embeddings and each sub-layer's output), so every later mask is the same too."""
    monkeypatch.setattr(layers, "dropped_attention", lambda *a, **k: pytest.fail("attention written out at 0"))
    calls = []
    real = FastDropout.forward
    monkeypatch.setattr(FastDropout, "forward", lambda self, x: calls.append((self.p, tuple(x.shape))) or real(self, x))
    m = model(kind, dropout=0.1).train()
    forward(m, kind, 0)
    assert sorted({p for p, _ in calls if p > 0}) == [0.1]
    sublayers = {"translation": 2 * 2 + 2 * 3, "classification": 2 * 2, "lm": 2 * 2}[kind]
    embeddings = {"translation": 2, "classification": 1, "lm": 1}[kind] + (kind == "classification")   # + pooled
    assert len([p for p, _ in calls if p > 0]) == sublayers + embeddings


def test_the_sites_are_the_attention_weights_and_the_feed_forward_activation(monkeypatch):
    """Each attention drops its softmaxed weights [B, heads, queries, keys] (rows summing to 1, masked keys
    at 0): encoder self-attention, decoder self-attention and cross-attention; each feed-forward layer its
    activation [B, T, ff_dim] (non-negative: after the ReLU)."""
    seen = []
    real = FastDropout.forward

    def spy(self, x):
        if self.p in (0.25, 0.35):
            seen.append((self.p, tuple(x.shape), x.detach().clone()))
        return real(self, x)

    monkeypatch.setattr(FastDropout, "forward", spy)
    m = model("translation", dropout=0.0, attention_dropout=0.25, activation_dropout=0.35).train()
    src, tgt = inputs("translation")
    set_dropout_generator(m, torch.Generator().manual_seed(0))
    m(src, tgt)
    order = [(p, shape) for p, shape, _ in seen]
    enc = [(0.25, (3, 4, 7, 7)), (0.35, (3, 7, 32))]
    dec = [(0.25, (3, 4, 5, 5)), (0.25, (3, 4, 5, 7)), (0.35, (3, 5, 32))]
    assert order == enc * 2 + dec * 2
    for p, shape, x in seen:
        if p == 0.25:
            torch.testing.assert_close(x.sum(-1), torch.ones(shape[:-1]))
            if shape[-1] == 7:
                assert torch.all(x[0, :, :, 5:] == 0)   # padded source keys
            else:
                assert torch.all(x.triu(1) == 0)        # decoder self-attention is causal
        else:
            assert torch.all(x >= 0)


def test_written_out_attention_is_sdpas_without_dropout():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 6, 8, generator=g) for _ in range(3))
    mask = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    for m, causal in ((mask, False), (None, True), (None, False)):
        torch.testing.assert_close(layers.dropped_attention(q, k, v, m, causal, lambda w: w),
                                   layers.attend(q, k, v, m, causal))


def test_keys_are_unchanged_at_the_default_and_changed_when_set():
    """Keys computed on eab36c8, before the fields existed: still reached; a set rate is in the key."""
    before = {("multi30k", "xavier", 1): "05e60386544544e2", ("wikitext2", "xavier", 0): "e8d12af2017203ce"}
    plain = TrialConfig(task="multi30k", init="xavier", seed=1)
    tied = TrialConfig(task="wikitext2", seed=0, tie_embeddings=True)
    assert plain.key() == before[("multi30k", "xavier", 1)] and tied.key() == before[("wikitext2", "xavier", 0)]
    assert TrialConfig(task="multi30k", seed=1, attention_dropout=0.0, activation_dropout=0.0).key() == plain.key()
    keys = {plain.key()}
    for kw in ({"attention_dropout": 0.1}, {"activation_dropout": 0.1}, {"attention_dropout": 0.2},
               {"attention_dropout": 0.1, "activation_dropout": 0.1}):
        cfg = TrialConfig(task="multi30k", seed=1, **kw)
        assert all(cfg.key_fields()[k] == v for k, v in kw.items())
        keys.add(cfg.key())
    assert len(keys) == 5


def test_a_spec_accepts_them_keeps_its_hash_without_them_and_lists_every_bad_value():
    base = {"name": "t", "tasks": ["synthetic_lm"], "inits": ["xavier"], "seeds": [0]}
    plain = load_spec(base)
    assert plain.spec_hash() == load_spec({**base, "defaults": {"attention_dropout": None}}).spec_hash()
    assert "attention_dropout" not in str(plain.canonical()) and "activation_dropout" not in str(plain.canonical())
    spec = load_spec({**base, "tasks": [{"task": "synthetic_lm", "attention_dropout": 0.1}],
                      "defaults": {"activation_dropout": 0.2}})
    (trial,) = spec.expand()
    assert (trial.attention_dropout, trial.activation_dropout) == (0.1, 0.2)
    assert spec.spec_hash() != plain.spec_hash()
    with pytest.raises(SpecError) as e:
        load_spec({**base, "tasks": [{"task": "synthetic_lm", "attention_dropout": 1.0}],
                   "defaults": {"activation_dropout": -0.1}})
    problems = dict(e.value.problems)
    assert "less than 1" in problems["tasks[0].attention_dropout"]
    assert "greater than or equal to 0" in problems["defaults.activation_dropout"]


def test_the_trainer_and_the_model_refuse_rates_out_of_range_naming_each():
    from embinit.train.prepare import check_config
    with pytest.raises(EmbinitError) as e:
        check_config(TrialConfig(task="synthetic_lm", attention_dropout=1.0, activation_dropout=-0.5))
    assert "attention_dropout must be < 1" in str(e.value) and "activation_dropout must be >= 0" in str(e.value)
    with pytest.raises(EmbinitError) as e:
        ModelConfig(d_model=D, heads=4, attention_dropout=1.0, activation_dropout=1.5)
    assert "attention_dropout must be in [0, 1), got 1.0" in str(e.value)
    assert "activation_dropout must be in [0, 1), got 1.5" in str(e.value)


def test_embinit_train_takes_them_and_lists_every_bad_value(tmp_path, capsys):
    import argparse

    from embinit.cli import main, train
    parser = argparse.ArgumentParser()
    train.register(parser.add_subparsers())
    args = parser.parse_args(["train", "--task", "synthetic_lm", "--attention-dropout", "0.1",
                              "--activation-dropout", "0.2"])
    cfg = train.config_from_args(args)
    assert (cfg.attention_dropout, cfg.activation_dropout) == (0.1, 0.2)
    code = main(["train", "--task", "synthetic_lm", "--attention-dropout", "1", "--activation-dropout", "-0.1",
                 "--threads", "1", "--epochs", "1", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "cannot train this trial (2 problems)" in err, err
    assert "--attention-dropout: Input should be less than 1" in err
    assert "--activation-dropout: Input should be greater than or equal to 0" in err


def test_trials_of_other_rates_never_share_a_fused_group():
    from embinit.sweep.fused import fuse_key
    base = TrialConfig(task="synthetic_translation", seed=0).to_dict()
    keys = {fuse_key({**base, **kw}) for kw in ({}, {"attention_dropout": 0.1}, {"activation_dropout": 0.1})}
    assert len(keys) == 3 and fuse_key({**base, "seed": 1}) == fuse_key(base)


@pytest.mark.parametrize("site", ["attention_dropout", "activation_dropout"])
def test_a_fused_member_draws_the_masks_of_its_own_batch(site):
    """Two translation members whose batches differ in rows, source and target length (the synthetic task's
    sentence pairs are of one length, so a trial-level test cannot see cross-attention's keys): each
    member's fused loss is its own model's, its masks drawn from its own generator for its own shapes."""
    import torch.nn.functional as F

    from embinit.models.fused import FusedEncoderDecoder
    from embinit.models.stacked import IGNORE
    from embinit.train.batching import flat_targets, stack_padded
    members = [model("translation", dropout=0.0, **{site: 0.3}) for _ in range(2)]
    g = torch.Generator().manual_seed(3)
    batches = []
    for rows, s, t in ((3, 7, 5), (2, 4, 6)):
        src, tgt = torch.randint(4, 20, (rows, s), generator=g), torch.randint(4, 24, (rows, t + 1), generator=g)
        batches.append({"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:], "keep": torch.arange(rows * t),
                        "targets": tgt[:, 1:].reshape(-1), "n_targets": rows * t})
    alone = []
    for i, (m, b) in enumerate(zip(members, batches)):
        set_dropout_generator(m.train(), torch.Generator().manual_seed(10 + i))
        logits = m(b["src"], b["tgt_in"])
        alone.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b["tgt_out"].reshape(-1)))
    fused = FusedEncoderDecoder(members, [torch.Generator().manual_seed(10 + i) for i in range(2)]).train()
    rows, targets = flat_targets(batches, "tgt_out", 6, IGNORE)
    losses = fused.losses(stack_padded([b["src"] for b in batches], 0), stack_padded([b["tgt_in"] for b in batches], 0),
                          rows, targets, [tuple(b["src"].shape) for b in batches],
                          [tuple(b["tgt_in"].shape) for b in batches])
    torch.testing.assert_close(losses, torch.stack(alone), rtol=1e-5, atol=1e-6)
    set_dropout_generator(members[0], torch.Generator().manual_seed(99))
    b = batches[0]
    other = F.cross_entropy(members[0](b["src"], b["tgt_in"]).reshape(-1, 24), b["tgt_out"].reshape(-1))
    assert not torch.isclose(other, alone[0], rtol=1e-4)   # another generator: other masks, another loss


def test_a_null_axis_value_is_the_default_with_its_key():
    """`axes: {attention_dropout: [null, 0.2]}`: null means the default (0) and its key, as `dropout: null`
    means the task's default. It was planned under a key of its own, and the trial then failed comparing
    0.0 <= None. The same holds for any field with a default, e.g. `pe_base`."""
    base = {"name": "t", "tasks": ["synthetic_classification"], "inits": ["xavier"], "seeds": [0]}
    spec = load_spec({**base, "axes": {"attention_dropout": [None, 0.2], "pe_base": [None]}})
    null, set_ = spec.expand()
    assert (null.attention_dropout, null.pe_base) == (0.0, 10000.0)
    assert null.key() == load_spec(base).expand()[0].key()
    assert set_.attention_dropout == 0.2 and set_.key() != null.key()
    assert TrialConfig(task="multi30k", activation_dropout=None, pe_base=None).key() == TrialConfig("multi30k").key()
