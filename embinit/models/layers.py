"""Transformer building blocks: dropout, attention, feed-forward, encoder and decoder layers.

Written for speed on CPU without changing what is computed:
- Dropout sits where Vaswani et al. (2017, section 5.4) put it: on each sub-layer's output before the
  residual add, and on the sum of embeddings and position encodings. By default (the paper's runs) there
  is none on the attention weights or inside the feed-forward layer, where `torch.nn.Transformer` and
  fairseq also put it: the paper describes neither, and without attention dropout
  `scaled_dot_product_attention` can use its fused kernel. A trial's `attention_dropout` (on the
  softmaxed weights of every attention) and `activation_dropout` (after the feed-forward activation,
  before the second linear) switch them on; at 0 the computation is exactly the one without them.
  Attention with dropout is written out (`dropped_attention`): SDPA's own `dropout_p` would draw its
  mask from torch's global generator, not the trial's, so a seed would no longer fix every mask and a
  fused group's members would not draw their own.
- `FastDropout` draws its mask from 16 random bits per element (four elements per 64-bit draw) rather
  than `bernoulli_`'s one float per element: about 4x cheaper, with a drop probability of
  6554/65536 = 0.100006 for p=0.1 (recorded in `effective_p`). It takes an explicit generator, so a
  seed fixes every mask.
- Query, key and value projections are one fused matrix (key and value for cross-attention).
- Decoder self-attention keeps a key/value cache for incremental (one token at a time) decoding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# The CUDA attention kernels `attend` lets PyTorch choose from, in its order: not cuDNN's. cuDNN attention
# builds an execution plan for every new (batch, length) shape, and batches of sentences bring a new shape
# almost every step: on an H200 (PyTorch 2.11, bf16, Multi30k D=300) each forward and each backward call
# spent ~11 ms on the host there, two thirds of the step, and bf16 trained at 13.6k tokens/s against
# 81k in fp32 (bench/results/gpu/profile_bf16_h200.txt).
CUDA_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]

_BITS = 16
_LEVELS = 1 << _BITS


class FastDropout(nn.Module):
    """Inverted dropout with a mask of 16-bit integer draws from `self.generator`."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        # A 64-bit draw from random_() is uniform on [0, 2^63): viewed as four int16 lanes, lanes 0-2
        # are uniform on [-32768, 32767] and lane 3 (the top bits) on [0, 32767], so each lane gets the
        # threshold that drops a share p of its own range.
        t16, t15 = round(p * _LEVELS), round(p * _LEVELS / 2)
        self.register_buffer("threshold", torch.tensor([t16 - _LEVELS // 2] * 3 + [t15], dtype=torch.int16),
                             persistent=False)
        self.effective_p = t16 / _LEVELS
        self.generator: torch.Generator | None = None  # set by the trainer; None = torch's default

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        n = x.numel()
        draws = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device)
        draws.random_(generator=self.generator)
        keep = keep_lanes(draws, self.threshold)[:n].view(x.shape)
        # one float mask holding 0 or 1/(1-p): autograd saves it and backward is a single multiply
        mask = keep.to(x.dtype).mul_(1.0 / (1.0 - self.effective_p))
        return x * mask


def keep_lanes(draws: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """The keep bits of 64-bit `draws`, four int16 lanes each (flat bool, 4 per draw): what FastDropout
    keeps, and the fused models' dropout for each member's own draws."""
    return (draws.view(torch.int16).view(-1, 4) >= threshold).view(-1)


class Attention(nn.Module):
    """Multi-head attention with fused projections; `self_attn` decides between QKV and Q + KV."""

    def __init__(self, d_model: int, heads: int, self_attn: bool = True, dropout: float = 0.0):
        super().__init__()
        self.heads, self.head_dim, self.self_attn = heads, d_model // heads, self_attn
        self.drop = FastDropout(dropout)   # on the softmaxed attention weights (`attention_dropout`)
        if self_attn:
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.qkv.weight.fused_parts = 3  # read by xavier_init_
        else:
            self.q = nn.Linear(d_model, d_model)
            self.kv = nn.Linear(d_model, 2 * d_model)
            self.kv.weight.fused_parts = 2
        self.out = nn.Linear(d_model, d_model)

    def _split(self, x: torch.Tensor, parts: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, parts, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the encoder memory (computed once per source for cross-attention)."""
        k, v = self._split(self.kv(memory), 2)
        return k, v

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False,
                memory: torch.Tensor | None = None, memory_kv=None, cache: dict | None = None):
        """x: [B, T, D]. mask: bool [B, 1, 1|T, S], True = attend. `cache` (self-attention only) holds
        the keys/values of earlier positions and is extended in place; with a cache, x is the new
        positions only and sees every cached one."""
        b, t, d = x.shape
        if self.self_attn:
            q, k, v = self._split(self.qkv(x), 3)
            if cache is not None:
                if "k" in cache:
                    if t != 1:  # SDPA's is_causal aligns top-left: wrong for a query block after a cache
                        raise ValueError("a cached attention step takes one new position at a time")
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                    causal = False  # the one new position may see every cached one
                cache["k"], cache["v"] = k, v
        else:
            q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
            k, v = memory_kv if memory_kv is not None else self.project_kv(memory)
        drop = self.drop if self.training and self.drop.p > 0.0 else None
        mask, causal = causal_mask(mask, causal, q.shape[-2], k.shape[-2])
        y = attend(q, k, v, mask, causal, drop=drop)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


def causal_mask(mask: torch.Tensor | None, causal: bool, t: int, s: int):
    """(mask, causal) for `attend`: with no mask, SDPA's own `is_causal`; with one, the causal part is
    joined to it (top-left aligned, as `is_causal` is), since SDPA takes one or the other."""
    if not causal or mask is None:
        return mask, causal
    return mask & torch.ones(t, s, dtype=torch.bool, device=mask.device).tril(), False


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           causal: bool, pad_heads: bool | None = None, drop=None) -> torch.Tensor:
    """`scaled_dot_product_attention` in the layout and precision its fast kernels take; with `drop` (a
    function of the softmaxed weights [B, H, T, S]: attention dropout in training) `dropped_attention`.

    - CPU, bf16: attention runs in fp32. PyTorch's CPU flash-attention kernel is 3-10x slower in bf16
      than in fp32 at these sizes (head_dim 30-64, sequences of ~15-40; measured fwd+bwd on an AVX512-BF16
      EPYC: 20 ms vs 4 ms), which made the whole bf16 step slower than fp32; its FLOPs are a few percent
      of the step, the projections keep bf16.
    - CUDA: the fused (flash / memory-efficient) kernels need head_dim a multiple of 8; D=300 with 10
      heads has 30. q, k and v are zero-padded to the next multiple (zeros add nothing to q.k, and the
      padded value columns are cut off) with the scale of the true head_dim. `pad_heads` forces it (tests).
      The kernel is flash or memory-efficient attention, never cuDNN's (CUDA_ATTENTION).
    """
    if drop is not None:
        return dropped_attention(q, k, v, mask, causal, drop)
    if q.device.type == "cuda":
        with sdpa_kernel(CUDA_ATTENTION):
            return _attend(q, k, v, mask, causal, pad_heads)
    return _attend(q, k, v, mask, causal, pad_heads)


def _attend(q, k, v, mask, causal, pad_heads):
    hd = q.shape[-1]
    if q.device.type == "cpu" and q.dtype == torch.bfloat16:
        with torch.autocast("cpu", enabled=False):
            y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, is_causal=causal)
        return y.to(q.dtype)
    if pad_heads is None:
        pad_heads = q.device.type == "cuda" and hd % 8 != 0
    if not pad_heads:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    extra = -hd % 8
    q, k, v = (F.pad(x, (0, extra)) for x in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=hd ** -0.5)
    return y[..., :hd]


def dropped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                      causal: bool, drop) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim), masked) -> `drop` -> times v, as `torch.nn.Transformer` places
    attention dropout. `mask`: bool, True = attend; `causal`: position i sees 0..i (top-left aligned, as
    SDPA's is_causal). The softmax runs in fp32 (float64 input: in float64)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    if causal:
        t, s = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(v.dtype)
    return torch.matmul(drop(weights), v)


class FeedForward(nn.Module):
    """fc2(drop(relu(fc1(x)))): `drop` is `activation_dropout` (none at 0, the default)."""

    def __init__(self, d_model: int, ff_dim: int, dropout: float = 0.0):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, ff_dim), nn.Linear(ff_dim, d_model)
        self.drop = FastDropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(F.relu(self.fc1(x))))


class _Residual(nn.Module):
    """One sub-layer with its residual connection: post-LN `LN(x + drop(f(x)))` (the original
    transformer) or pre-LN `x + drop(f(LN(x)))`."""

    def __init__(self, d_model: int, dropout: float, pre_ln: bool):
        super().__init__()
        self.norm, self.drop, self.pre_ln = nn.LayerNorm(d_model), FastDropout(dropout), pre_ln

    def forward(self, x: torch.Tensor, f) -> torch.Tensor:
        if self.pre_ln:
            return x + self.drop(f(self.norm(x)))
        return self.norm(x + self.drop(f(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, ff_dim: int, dropout: float, pre_ln: bool,
                 attention_dropout: float = 0.0, activation_dropout: float = 0.0):
        super().__init__()
        self.attn = Attention(d_model, heads, dropout=attention_dropout)
        self.ff = FeedForward(d_model, ff_dim, activation_dropout)
        self.res1 = _Residual(d_model, dropout, pre_ln)
        self.res2 = _Residual(d_model, dropout, pre_ln)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, causal: bool = False,
                cache: dict | None = None) -> torch.Tensor:
        x = self.res1(x, lambda h: self.attn(h, mask=mask, causal=causal, cache=cache))
        return self.res2(x, self.ff)


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, ff_dim: int, dropout: float, pre_ln: bool,
                 attention_dropout: float = 0.0, activation_dropout: float = 0.0):
        super().__init__()
        self.self_attn = Attention(d_model, heads, dropout=attention_dropout)
        self.cross_attn = Attention(d_model, heads, self_attn=False, dropout=attention_dropout)
        self.ff = FeedForward(d_model, ff_dim, activation_dropout)
        self.res1, self.res2, self.res3 = (_Residual(d_model, dropout, pre_ln) for _ in range(3))

    def forward(self, x, memory=None, memory_mask=None, memory_kv=None, cache: dict | None = None):
        x = self.res1(x, lambda h: self.self_attn(h, causal=True, cache=cache))
        x = self.res2(x, lambda h: self.cross_attn(h, mask=memory_mask, memory=memory,
                                                   memory_kv=memory_kv))
        return self.res3(x, self.ff)


def xavier_init_(module: nn.Module, generator: torch.Generator | None = None) -> None:
    """Xavier-uniform for every Linear weight, zeros for its bias; LayerNorms stay at (1, 0) and
    embedding tables are left alone (their values come from the init library). A fused QKV or KV matrix
    is initialized per part, so each projection gets the bound of its own D x D matrix, as separate
    projections would."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            with torch.no_grad():
                for chunk in m.weight.chunk(getattr(m.weight, "fused_parts", 1), dim=0):
                    nn.init.xavier_uniform_(chunk, generator=generator)
                if m.bias is not None:
                    m.bias.zero_()
