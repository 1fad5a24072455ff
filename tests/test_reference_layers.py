"""embinit's hand-written layers (embinit.models.layers) against torch's reference layers:
`torch.nn.TransformerEncoderLayer` / `TransformerDecoderLayer` (activation relu, batch_first, the same
LayerNorm eps, post-LN and pre-LN = `norm_first`), loaded with embinit's weights (the fused QKV is torch's
in_proj; cross-attention's Q and KV rows concatenated are its in_proj), must compute the same outputs: in
eval mode, with key padding (embinit: True = attend; torch: True = ignore), causal self-attention, the
decoder's cached one-position-at-a-time steps, a member of a fused group, and in training with the dropout
masks made deterministic (each site's mask drawn in call order from one generator in both).

Only layers are compared: embinit's pre-LN stacks end with a LayerNorm (`enc_norm`, `dec_norm`, `norm`)
that the fused tests apply to torch's layer output too; init (Xavier per fused part) does not matter, every
weight is drawn here."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from embinit.models import ModelConfig, build_model
from embinit.models.fused import FusedEncoderDecoder
from embinit.models.fused_encoder import FusedLM
from embinit.models.layers import Attention, DecoderLayer, EncoderLayer, FastDropout

torch.set_num_threads(1)

# d_model, heads, ff_dim, batch, source length, target length
SHAPES = [(8, 1, 16, 2, 5, 4), (12, 3, 20, 3, 7, 6), (16, 4, 64, 4, 9, 5), (64, 4, 128, 2, 6, 8)]
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-5, atol=1e-5)}


def randomize_(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter random (biases and LayerNorm gains and shifts too), so a swapped or dropped
    parameter shows in the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            p.copy_(1 + 0.2 * noise if "norm" in name and name.endswith("weight") else 0.3 * noise)
    return module


def eps_of(layer: nn.Module) -> float:
    (eps,) = {m.eps for m in layer.modules() if isinstance(m, nn.LayerNorm)}
    return eps


def torch_encoder(e: EncoderLayer, d, heads, ff, pre_ln) -> nn.TransformerEncoderLayer:
    t = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="relu", layer_norm_eps=eps_of(e),
                                   batch_first=True, norm_first=pre_ln, dtype=e.attn.qkv.weight.dtype)
    load(t, e, {"self_attn.in_proj_weight": ["attn.qkv.weight"], "self_attn.in_proj_bias": ["attn.qkv.bias"],
                "self_attn.out_proj.weight": ["attn.out.weight"], "self_attn.out_proj.bias": ["attn.out.bias"],
                "linear1.weight": ["ff.fc1.weight"], "linear1.bias": ["ff.fc1.bias"],
                "linear2.weight": ["ff.fc2.weight"], "linear2.bias": ["ff.fc2.bias"],
                "norm1.weight": ["res1.norm.weight"], "norm1.bias": ["res1.norm.bias"],
                "norm2.weight": ["res2.norm.weight"], "norm2.bias": ["res2.norm.bias"]})
    return t.eval()


def torch_decoder(e: DecoderLayer, d, heads, ff, pre_ln) -> nn.TransformerDecoderLayer:
    t = nn.TransformerDecoderLayer(d, heads, ff, dropout=0.0, activation="relu", layer_norm_eps=eps_of(e),
                                   batch_first=True, norm_first=pre_ln, dtype=e.self_attn.qkv.weight.dtype)
    mapping = {"self_attn.in_proj_weight": ["self_attn.qkv.weight"], "self_attn.in_proj_bias": ["self_attn.qkv.bias"],
               "self_attn.out_proj.weight": ["self_attn.out.weight"], "self_attn.out_proj.bias": ["self_attn.out.bias"],
               # torch's cross-attention in_proj: the query rows, then the key rows, then the value rows
               "multihead_attn.in_proj_weight": ["cross_attn.q.weight", "cross_attn.kv.weight"],
               "multihead_attn.in_proj_bias": ["cross_attn.q.bias", "cross_attn.kv.bias"],
               "multihead_attn.out_proj.weight": ["cross_attn.out.weight"],
               "multihead_attn.out_proj.bias": ["cross_attn.out.bias"],
               "linear1.weight": ["ff.fc1.weight"], "linear1.bias": ["ff.fc1.bias"],
               "linear2.weight": ["ff.fc2.weight"], "linear2.bias": ["ff.fc2.bias"]}
    for i in (1, 2, 3):
        mapping.update({f"norm{i}.weight": [f"res{i}.norm.weight"], f"norm{i}.bias": [f"res{i}.norm.bias"]})
    load(t, e, mapping)
    return t.eval()


def load(t: nn.Module, e: nn.Module, mapping: dict[str, list[str]]) -> None:
    """torch parameter <- embinit parameters (concatenated by rows); every parameter of both is mapped."""
    ours = dict(e.named_parameters())
    theirs = dict(t.named_parameters())
    assert set(theirs) == set(mapping)
    assert set(ours) == {n for names in mapping.values() for n in names}
    with torch.no_grad():
        for name, sources in mapping.items():
            theirs[name].copy_(torch.cat([ours[n] for n in sources]))


def layers(d, heads, ff, pre_ln, dtype, seed=0):
    enc = randomize_(EncoderLayer(d, heads, ff, 0.0, pre_ln).to(dtype), seed).eval()
    dec = randomize_(DecoderLayer(d, heads, ff, 0.0, pre_ln).to(dtype), seed + 1).eval()
    return enc, torch_encoder(enc, d, heads, ff, pre_ln), dec, torch_decoder(dec, d, heads, ff, pre_ln)


def batch(b, s, t, d, dtype, seed=2):
    """Source x [B, S, D] with row i padded after S - 2i positions (row 0 unpadded, every row keeps one),
    its key mask (True = keep), and a target y [B, T, D]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, s, d, generator=g, dtype=torch.float64).to(dtype)
    y = torch.randn(b, t, d, generator=g, dtype=torch.float64).to(dtype)
    lengths = torch.tensor([max(1, s - 2 * i) for i in range(b)])
    keep = torch.arange(s)[None, :] < lengths[:, None]
    return x, keep, y


def causal(n: int) -> torch.Tensor:
    """torch's attn_mask of causal self-attention, bool (as its key padding masks): True = ignore."""
    return torch.ones(n, n, dtype=torch.bool).triu(1)


def run_encoder(e, t, x, keep):
    return e(x, mask=keep[:, None, None, :]), t(x, src_key_padding_mask=~keep)


def run_decoder(e, t, y, memory, keep):
    ours = e(y, memory=memory, memory_mask=keep[:, None, None, :])
    n = y.shape[1]
    return ours, t(y, memory, tgt_mask=causal(n), tgt_is_causal=True, memory_key_padding_mask=~keep)


def test_layer_norms_use_torchs_default_eps():
    """The reference layers are built with embinit's eps; it is torch's default too (1e-5), as is the fused
    models' `F.layer_norm`."""
    e = DecoderLayer(8, 2, 16, 0.0, False)
    assert eps_of(e) == eps_of(EncoderLayer(8, 2, 16, 0.0, True)) == 1e-5
    assert nn.TransformerEncoderLayer(8, 2).norm1.eps == 1e-5


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("pre_ln", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_encoder_layer_is_torchs_with_padding_and_causal(shape, pre_ln, dtype):
    d, heads, ff, b, s, _ = shape
    enc, t_enc, _, _ = layers(d, heads, ff, pre_ln, dtype)
    x, keep, _ = batch(b, s, 1, d, dtype)
    ours, ref = run_encoder(enc, t_enc, x, keep)
    torch.testing.assert_close(ours, ref, **TOL[dtype])        # padded queries too: both compute them
    torch.testing.assert_close(enc(x), t_enc(x), **TOL[dtype])  # no padding: embinit passes no mask
    # the decoder-only LM's layer: causal self-attention, no key mask
    torch.testing.assert_close(enc(x, causal=True), t_enc(x, src_mask=causal(s), is_causal=True),
                               **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("pre_ln", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_decoder_layer_is_torchs_with_causal_self_attention_and_padded_memory(shape, pre_ln, dtype):
    d, heads, ff, b, s, t = shape
    _, _, dec, t_dec = layers(d, heads, ff, pre_ln, dtype)
    memory, keep, y = batch(b, s, t, d, dtype)
    ours, ref = run_decoder(dec, t_dec, y, memory, keep)
    torch.testing.assert_close(ours, ref, **TOL[dtype])
    torch.testing.assert_close(dec(y, memory=memory), t_dec(y, memory, tgt_mask=causal(t), tgt_is_causal=True),
                               **TOL[dtype])
    # embinit's decoder takes no target padding mask: a padded (trailing) target position is a key only to
    # later positions, themselves padding, so the real positions are what torch's gives with that mask
    real = torch.arange(t)[None, :] < torch.tensor([max(1, t - i) for i in range(b)])[:, None]
    masked = t_dec(y, memory, tgt_mask=causal(t), tgt_key_padding_mask=~real, memory_key_padding_mask=~keep)
    torch.testing.assert_close(ours[real], masked[real], **TOL[dtype])


def test_torchs_fast_path_agrees_too(monkeypatch):
    """Without autograd torch's eval-mode encoder layer takes its fused C++ path (`_transformer_encoder_layer_fwd`);
    the tests above run its Python path (grad enabled). Both give embinit's output, padded query rows too."""
    calls = []
    fast = torch._transformer_encoder_layer_fwd
    monkeypatch.setattr(torch, "_transformer_encoder_layer_fwd", lambda *a, **k: calls.append(1) or fast(*a, **k))
    d, heads, ff, b, s, _ = SHAPES[2]
    for pre_ln in (False, True):
        enc, t_enc, _, _ = layers(d, heads, ff, pre_ln, torch.float64)
        x, keep, _ = batch(b, s, 1, d, torch.float64)
        with torch.no_grad():
            ours, ref = run_encoder(enc, t_enc, x, keep)
            torch.testing.assert_close(ours, ref, **TOL[torch.float64])
            torch.testing.assert_close(enc(x), t_enc(x), **TOL[torch.float64])
    assert len(calls) == 4


@pytest.mark.parametrize("pre_ln", [False, True])
def test_mask_convention_padded_positions_change_nothing_else_in_either(pre_ln):
    """embinit's mask is True = attend, torch's key_padding_mask True = ignore: the same positions are
    ignored. Changing a padded position's input (an encoder input, a memory vector) leaves every other
    position's output the same in both, and the two still agree; changing a real one changes the others."""
    d, heads, ff, b, s, t = SHAPES[1]
    dtype = torch.float64
    enc, t_enc, dec, t_dec = layers(d, heads, ff, pre_ln, dtype)
    x, keep, y = batch(b, s, t, d, dtype)
    assert not keep[1, -1] and keep[1, 0]
    moved = x.clone()
    moved[1, -1] += 5.0                                 # a padded position of row 1
    real = moved.clone()
    real[1, 0] += 5.0                                   # a real position of row 1
    others = torch.ones(b, s, dtype=torch.bool)
    others[1, -1] = False
    for run in (lambda inp: run_encoder(enc, t_enc, inp, keep), lambda mem: run_decoder(dec, t_dec, y, mem, keep)):
        (ours, ref), (ours_moved, ref_moved), (ours_real, ref_real) = run(x), run(moved), run(real)
        rows = others if ours.shape[1] == s else torch.ones(ours.shape[:2], dtype=torch.bool)
        torch.testing.assert_close(ours_moved[rows], ours[rows], rtol=0, atol=1e-12)
        torch.testing.assert_close(ref_moved[rows], ref[rows], rtol=0, atol=1e-12)
        torch.testing.assert_close(ours_moved, ref_moved, **TOL[dtype])
        for out, base in ((ours_real, ours), (ref_real, ref)):
            assert not torch.allclose(out[1, -1], base[1, -1])   # row 1's last output sees the real position
            torch.testing.assert_close(out[0], base[0], rtol=0, atol=1e-12)   # rows never mix


@pytest.mark.parametrize("pre_ln", [False, True])
@pytest.mark.parametrize("shape", SHAPES[1:3])
def test_cached_decoder_steps_are_torchs_full_causal_pass(shape, pre_ln):
    """The path greedy and beam search decode by (`decode_step`): one target position per call, earlier
    keys/values in the cache, the memory's keys/values projected once (`project_kv`). Each step's output
    is torch's full causal pass at that position. (tests/test_models.py checks the whole model's steps
    against its own full decoder.)"""
    d, heads, ff, b, s, t = shape
    dtype = torch.float64
    _, _, dec, t_dec = layers(d, heads, ff, pre_ln, dtype)
    memory, keep, y = batch(b, s, t, d, dtype)
    _, ref = run_decoder(dec, t_dec, y, memory, keep)
    kv, cache = dec.cross_attn.project_kv(memory), {}
    with torch.no_grad():
        steps = [dec(y[:, i:i + 1], memory_mask=keep[:, None, None, :], memory_kv=kv, cache=cache) for i in range(t)]
    torch.testing.assert_close(torch.cat(steps, 1), ref, **TOL[dtype])
    assert cache["k"].shape == (b, heads, t, d // heads)


def fused_members(kind, pre_ln, n=2):
    cfg = ModelConfig(d_model=16, heads=4, layers=1, ff_dim=32, max_positions=32, pre_ln=pre_ln, dropout=0.0)
    g = torch.Generator().manual_seed(5)
    tables = {k: torch.randn(20, 16, generator=g) for k in ("src", "tgt", "tok")}
    tables = {k: tables[k] for k in (("src", "tgt") if kind == "translation" else ("tok",))}
    return [randomize_(build_model(kind, tables, cfg, generator=torch.Generator().manual_seed(i)).double(), 10 + i)
            .eval() for i in range(n)]


@pytest.mark.parametrize("pre_ln", [False, True])
def test_a_fused_translation_members_layers_are_torchs(pre_ln):
    """A group's batched encoder and decoder layers (embinit.models.stacked), member by member, are torch's
    layers with that member's weights: on its embedded source / target (the member's own `src_embed`,
    `tgt_embed`), then the pre-LN stack's final LayerNorm. Member 1's batch has fewer rows and a shorter
    source than the group's (padded rows and positions)."""
    members = fused_members("translation", pre_ln)
    fused = FusedEncoderDecoder(members, [torch.Generator() for _ in members]).eval()
    g = torch.Generator().manual_seed(6)
    srcs = [torch.randint(4, 20, (3, 7), generator=g), torch.randint(4, 20, (2, 5), generator=g)]
    srcs[0][1, 4:] = 0
    tgts = [torch.randint(4, 20, (3, 6), generator=g), torch.randint(4, 20, (2, 6), generator=g)]
    src = torch.zeros(2, 3, 7, dtype=torch.long)
    tgt = torch.zeros(2, 3, 6, dtype=torch.long)
    for i, (a, b) in enumerate(zip(srcs, tgts)):
        src[i, :a.shape[0], :a.shape[1]], tgt[i, :b.shape[0]] = a, b
    src_shapes, tgt_shapes = [tuple(a.shape) for a in srcs], [tuple(b.shape) for b in tgts]
    with torch.no_grad():
        memory, mask = fused.encode(src, src_shapes)
        hidden = fused.decode(tgt, memory, mask, tgt_shapes, src_shapes)
    for i, m in enumerate(members):
        rows, s = src_shapes[i]
        keep = srcs[i] != 0
        t_enc = torch_encoder(m.encoder[0], 16, 4, 32, pre_ln)
        t_dec = torch_decoder(m.decoder[0], 16, 4, 32, pre_ln)
        mem = m.enc_norm(t_enc(m.src_embed(srcs[i]), src_key_padding_mask=~keep))
        torch.testing.assert_close(memory[i, :rows, :s], mem, **TOL[torch.float64])
        out = m.dec_norm(t_dec(m.tgt_embed(tgts[i]), mem, tgt_mask=causal(6), tgt_is_causal=True,
                               memory_key_padding_mask=~keep))
        torch.testing.assert_close(hidden[i, :rows], out, **TOL[torch.float64])


@pytest.mark.parametrize("pre_ln", [False, True])
def test_a_fused_lm_members_causal_layer_is_torchs(pre_ln):
    members = fused_members("lm", pre_ln)
    fused = FusedLM(members, [torch.Generator() for _ in members]).eval()
    ids = torch.randint(4, 20, (2, 3, 6), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        hidden = fused.hidden(ids, [(3, 6)] * 2, causal=True)
    for i, m in enumerate(members):
        t_enc = torch_encoder(m.layers[0], 16, 4, 32, pre_ln)
        ref = m.norm(t_enc(m.embed(ids[i]), src_mask=causal(6), is_causal=True))
        torch.testing.assert_close(hidden[i], ref, **TOL[torch.float64])


class Masks:
    """Deterministic dropout for both implementations: each call's mask drawn from one generator in call
    order, keep = uniform >= p, scaled by 1/(1-p). Records (p, element count) of every call."""

    def __init__(self):
        self.g, self.calls = torch.Generator().manual_seed(0), []

    def __call__(self, x: torch.Tensor, p: float) -> torch.Tensor:
        self.calls.append((p, x.numel()))
        keep = torch.rand(x.numel(), generator=self.g, dtype=x.dtype) >= p
        return x * keep.view(x.shape).to(x.dtype) / (1 - p)


def with_attention_weights(mha: nn.MultiheadAttention) -> None:
    """torch's layers call their attention with need_weights=False, which hands dropout to SDPA's kernel
    (its own mask); with need_weights=True the same attention is written out and drops its softmaxed
    weights by `F.dropout`, which the test can replace."""
    forward = mha.forward

    def written_out(*args, **kwargs):
        kwargs["need_weights"] = True
        return forward(*args, **kwargs)[0], None

    mha.forward = written_out


@pytest.mark.parametrize("pre_ln", [False, True])
def test_dropout_sites_and_order_are_torchs_in_training(pre_ln, monkeypatch):
    """In training, with every dropout mask made the same deterministic function of its call order (embinit's
    FastDropout and torch's F.dropout replaced), the layers give torch's outputs: residual dropout (0.1) on
    each sub-layer's output before the residual add (torch's dropout1/2/3), attention dropout (0.2) on the
    softmaxed weights inside each attention, activation dropout (0.3) after the ReLU (torch's `dropout`),
    drawn in the same order over the same number of elements."""
    d, heads, ff, b, s, t = SHAPES[1]
    dtype = torch.float32   # the written-out attention's softmax runs in fp32 (`dropped_attention`), in float64 too
    rates = dict(dropout=0.1, attention_dropout=0.2, activation_dropout=0.3)
    enc = randomize_(EncoderLayer(d, heads, ff, pre_ln=pre_ln, **rates).to(dtype), 0)
    dec = randomize_(DecoderLayer(d, heads, ff, pre_ln=pre_ln, **rates).to(dtype), 1)
    t_enc, t_dec = torch_encoder(enc, d, heads, ff, pre_ln), torch_decoder(dec, d, heads, ff, pre_ln)
    for t_layer in (t_enc, t_dec):   # torch's layer has one rate for every site; set each as embinit's
        for name, mod in t_layer.named_modules():
            if isinstance(mod, nn.MultiheadAttention):
                mod.dropout = rates["attention_dropout"]
                with_attention_weights(mod)
            elif isinstance(mod, nn.Dropout):
                mod.p = rates["activation_dropout"] if name == "dropout" else rates["dropout"]
    x, keep, y = batch(b, s, t, d, dtype)
    evals = run_encoder(enc, t_enc, x, keep)[0], run_decoder(dec, t_dec, y, x, keep)[0]
    ours_masks, torch_masks = Masks(), Masks()
    monkeypatch.setattr(FastDropout, "forward",
                        lambda self, inp: ours_masks(inp, self.p) if self.training and self.p > 0 else inp)
    monkeypatch.setattr(F, "dropout", lambda inp, p=0.5, training=True, inplace=False:
                        torch_masks(inp, p) if training and p > 0 else inp)
    for m in (enc, t_enc, dec, t_dec):
        m.train()
    ours_enc, ref_enc = run_encoder(enc, t_enc, x, keep)
    ours_dec, ref_dec = run_decoder(dec, t_dec, y, x, keep)
    torch.testing.assert_close(ours_enc, ref_enc, **TOL[dtype])
    torch.testing.assert_close(ours_dec, ref_dec, **TOL[dtype])
    assert ours_masks.calls == torch_masks.calls == [
        (0.2, b * heads * s * s), (0.1, b * s * d), (0.3, b * s * ff), (0.1, b * s * d),                  # encoder
        (0.2, b * heads * t * t), (0.1, b * t * d), (0.2, b * heads * t * s), (0.1, b * t * d),          # decoder
        (0.3, b * t * ff), (0.1, b * t * d)]
    for trained, evaluated in ((ours_enc, evals[0]), (ours_dec, evals[1])):
        assert not torch.allclose(trained, evaluated)   # the masks were applied


def test_a_padding_mask_and_causal_together_keep_both():
    """`Attention(..., mask=..., causal=True)` joins the causal part to the padding mask (SDPA takes one or
    the other; the causal part was dropped when a mask was given): equal to torch's layer given both."""
    torch.manual_seed(0)
    ours = Attention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    both = ours(x, mask=keep[:, None, None, :], causal=True)
    ref = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv.weight)
        ref.in_proj_bias.copy_(ours.qkv.bias)
        ref.out_proj.weight.copy_(ours.out.weight)
        ref.out_proj.bias.copy_(ours.out.bias)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    want, _ = ref(x, x, x, key_padding_mask=~keep, attn_mask=future, need_weights=False)
    torch.testing.assert_close(both[0], want[0])
    torch.testing.assert_close(both[1, :3], want[1, :3])
    causal_only = ours(x, causal=True)
    assert not torch.allclose(both[1, :3], ours(x, mask=keep[:, None, None, :])[1, :3])   # causal kept
    torch.testing.assert_close(both[0], causal_only[0])


def test_written_out_attention_keeps_float64():
    """`dropped_attention` (attention dropout on) softmaxes in fp32 for low precisions, but a float64 input
    stays float64: with an identity `drop` it equals the reference attention to float64 precision."""
    from embinit.models.layers import dropped_attention
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 4, 8, generator=g, dtype=torch.float64) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    got = dropped_attention(q, k, v, None, True, lambda w: w)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
