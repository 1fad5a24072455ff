"""Models: shapes, init, incremental decoding, and the ablation switches (checked on parameters and
outputs)."""

import math

import pytest
import torch

from embinit.errors import EmbinitError
from embinit.models import (FastDropout, ModelConfig, build_model, embedding_parameters,
                            set_dropout_generator, set_trainable)
from embinit.train.decoding import EOS_ID, beam_search, greedy, max_decode_len, translate

torch.set_num_threads(1)
D = 16


def tables(v_src=20, v_tgt=24, d=D, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"src": torch.randn(v_src, d, generator=g), "tgt": torch.randn(v_tgt, d, generator=g),
            "tok": torch.randn(v_tgt, d, generator=g)}


def model(kind="translation", seed=0, **kw):
    cfg = ModelConfig(**{"d_model": D, "heads": 4, "layers": 2, "ff_dim": 32, "max_positions": 64, **kw})
    t = tables()
    t = {k: t[k] for k in (("src", "tgt") if kind == "translation" else ("tok",))}
    return build_model(kind, t, cfg, num_labels=3, generator=torch.Generator().manual_seed(seed))


def ids(b, t, v=20, seed=1):
    return torch.randint(4, v, (b, t), generator=torch.Generator().manual_seed(seed))


def test_shapes_of_the_three_models():
    assert model()(ids(3, 7), ids(3, 5)).shape == (3, 5, 24)
    assert model("classification")(ids(3, 7)).shape == (3, 3)
    assert model("lm")(ids(3, 7)).shape == (3, 7, 24)


def test_heads_must_divide_d_model():
    with pytest.raises(EmbinitError, match="heads=5 does not divide d_model=16"):
        ModelConfig(d_model=16, heads=5)


def test_table_dimension_must_match_d_model():
    with pytest.raises(EmbinitError, match="dimension 8 but the model's d_model is 16"):
        build_model("lm", {"tok": torch.randn(10, 8)}, ModelConfig(d_model=16, heads=4))


def test_embedding_tables_are_used_as_given_and_other_weights_are_xavier():
    t = tables()
    m = build_model("translation", {"src": t["src"], "tgt": t["tgt"]}, ModelConfig(d_model=D, heads=4),
                    generator=torch.Generator().manual_seed(0))
    assert torch.equal(m.src_embed.embedding.weight, t["src"])
    assert torch.equal(m.tgt_embed.embedding.weight, t["tgt"])
    bound = math.sqrt(6 / (D + D))  # each of Q, K, V is a D x D projection
    qkv = m.encoder[0].attn.qkv.weight
    assert qkv.abs().max() <= bound and qkv.abs().max() > 0.9 * bound
    assert torch.count_nonzero(m.encoder[0].attn.qkv.bias) == 0
    out_bound = math.sqrt(6 / (D + 24))
    assert m.output.weight.abs().max() <= out_bound


def test_same_generator_same_weights_and_tables_do_not_change_other_weights():
    a, b = model(seed=3), model(seed=3)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n
    # a different target table leaves every non-embedding weight identical (paired comparisons)
    t = tables(seed=9)
    c = build_model("translation", {"src": t["src"], "tgt": t["tgt"]}, a.cfg,
                    generator=torch.Generator().manual_seed(3))
    emb = {id(p) for p in embedding_parameters(c)}
    for (n, p), (_, q) in zip(a.named_parameters(), c.named_parameters()):
        if id(q) not in emb:
            assert torch.equal(p, q), n


@pytest.mark.parametrize("pre_ln", [False, True])
def test_cached_decoding_equals_full_decoder(pre_ln):
    m = model(pre_ln=pre_ln).eval()
    src, tgt = ids(3, 9), ids(3, 6, v=24, seed=2)
    src[0, 6:] = 0  # padding in the source
    with torch.no_grad():
        memory, mask = m.encode(src)
        full = m.output(m.decode(tgt, memory, mask))
        state = m.start_state(memory, mask)
        steps = torch.stack([m.decode_step(tgt[:, i:i + 1], state) for i in range(6)], 1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)


def test_greedy_cached_equals_uncached_and_beam_search_gives_one_hypothesis_per_row():
    """A beam of one need not give greedy's output (its live hypothesis goes on after greedy's eos, and a
    longer one may score better); it scores at least as well (tests/test_beam_search.py)."""
    m = model().eval()
    src = ids(5, 8)
    with torch.no_grad():
        cached = greedy(m, src, cached=True)
        uncached = greedy(m, src, cached=False)
        beam3 = beam_search(m, src, beam=3)
    assert cached == uncached
    assert len(beam3) == 5 and all(isinstance(h, list) for h in beam3)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_translation_that_never_ends_stops_at_its_own_cap_whatever_it_is_batched_with(beam):
    """A row that never emits eos ends at 1.5 x its own source (+ eos) + 10, not at its batch's longest
    source's cap: the outputs, and so BLEU, are the same batched one at a time or all together."""
    m = model().eval()
    with torch.no_grad():
        m.output.bias[EOS_ID] = -1e9   # eos is never the argmax, nor in any beam
    g = torch.Generator().manual_seed(2)
    sources = [torch.randint(4, 20, (n,), generator=g).tolist() for n in (3, 11, 5, 20, 1, 8)]
    alone = translate(m, sources, beam_size=beam, batch_size=1)
    together = translate(m, sources, beam_size=beam, batch_size=len(sources))
    assert together == alone
    assert [len(h) for h in together] == [max_decode_len(len(s) + 1, m.cfg.max_positions) for s in sources]
    assert all(EOS_ID not in h and 0 not in h for h in together)


def test_without_position_encoding_the_encoder_is_permutation_equivariant():
    src = ids(2, 7)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    with torch.no_grad():
        off = model(pos_encoding=False).eval()
        h, _ = off.encode(src)
        hp, _ = off.encode(src[:, perm])
        torch.testing.assert_close(hp, h[:, perm], atol=1e-5, rtol=1e-5)
        on = model(pos_encoding=True).eval()
        h, _ = on.encode(src)
        hp, _ = on.encode(src[:, perm])
        assert not torch.allclose(hp, h[:, perm], atol=1e-3)


def _step(m, kind):
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    out = m(ids(4, 6), ids(4, 5, v=24)) if kind == "translation" else m(ids(4, 6))
    out.float().pow(2).mean().backward()
    opt.step()


@pytest.mark.parametrize("kind", ["translation", "classification", "lm"])
def test_frozen_embeddings_do_not_change_and_the_rest_does(kind):
    m = model(kind)
    set_trainable(m, train_embeddings=False)
    emb = {id(p) for p in embedding_parameters(m)}
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    _step(m, kind)
    for n, p in m.named_parameters():
        if id(p) in emb:
            assert torch.equal(p, before[n]), n
    assert any(not torch.equal(p, before[n]) for n, p in m.named_parameters() if id(p) not in emb)


@pytest.mark.parametrize("kind", ["translation", "classification", "lm"])
def test_freeze_non_embeddings_trains_only_the_embeddings(kind):
    m = model(kind)
    set_trainable(m, freeze_non_embeddings=True)
    emb = {id(p) for p in embedding_parameters(m)}
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    _step(m, kind)
    for n, p in m.named_parameters():
        if id(p) not in emb:
            assert torch.equal(p, before[n]), n
    assert all(not torch.equal(p, before[n]) for n, p in m.named_parameters() if id(p) in emb)


def test_freezing_everything_is_an_error():
    with pytest.raises(EmbinitError, match="nothing to train"):
        set_trainable(model(), train_embeddings=False, freeze_non_embeddings=True)


def test_classifier_ignores_padding_and_lm_is_causal():
    clf = model("classification").eval()
    x = ids(2, 6)
    padded = torch.cat([x, torch.zeros(2, 3, dtype=torch.long)], 1)
    with torch.no_grad():
        torch.testing.assert_close(clf(padded), clf(x), atol=1e-5, rtol=1e-5)
        lm = model("lm").eval()
        y = x.clone()
        y[:, 4:] = 5
        torch.testing.assert_close(lm(y)[:, :4], lm(x)[:, :4], atol=1e-5, rtol=1e-5)


def test_fast_dropout_rate_scale_and_determinism():
    d = FastDropout(0.1)
    x = torch.ones(200_000)
    d.generator = torch.Generator().manual_seed(0)
    y = d(x)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - 0.1) < 0.005
    assert abs(y.mean().item() - 1.0) < 0.01              # inverted dropout keeps the expectation
    d.generator = torch.Generator().manual_seed(0)
    assert torch.equal(d(x), y)                           # one seed, one mask
    assert torch.equal(d.eval()(x), x)


def test_dropout_generator_makes_training_forward_reproducible():
    m = model().train()
    src, tgt = ids(2, 5), ids(2, 4, v=24)
    set_dropout_generator(m, torch.Generator().manual_seed(5))
    a = m(src, tgt)
    set_dropout_generator(m, torch.Generator().manual_seed(5))
    b = m(src, tgt)
    set_dropout_generator(m, torch.Generator().manual_seed(6))
    c = m(src, tgt)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_attention_with_heads_padded_to_a_multiple_of_8_is_the_same():
    """The CUDA layout for the fused SDPA kernels (head_dim 30 -> 32, zero-padded, true scale), checked
    here on the CPU: same output, masked or causal."""
    from embinit.models.layers import attend
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 10, 9, 30, generator=g) for _ in range(3))
    mask = torch.ones(3, 1, 1, 9, dtype=torch.bool)
    mask[0, :, :, 5:] = False
    for m, causal in ((mask, False), (None, True)):
        torch.testing.assert_close(attend(q, k, v, m, causal, pad_heads=True),
                                   attend(q, k, v, m, causal, pad_heads=False))


def test_bf16_attention_on_cpu_runs_its_core_in_fp32():
    from embinit.models.layers import attend
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 7, 16, generator=g) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), None, True)
    ref = torch.nn.functional.scaled_dot_product_attention(q.bfloat16().float(), k.bfloat16().float(),
                                                           v.bfloat16().float(), is_causal=True)
    assert y.dtype == torch.bfloat16 and torch.equal(y, ref.bfloat16())
