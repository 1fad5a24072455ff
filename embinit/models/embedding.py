"""Model sizes and the input layer: token embedding x sqrt(D) + sinusoidal position encoding."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from embinit.errors import EmbinitError
from embinit.model_dims import divisors
from embinit.models.layers import FastDropout
from embinit.posenc import sinusoidal


@dataclass(frozen=True)
class ModelConfig:
    """The sizes and switches of one transformer (the vocabulary sizes come from its tables)."""

    d_model: int
    heads: int = 8
    layers: int = 3
    ff_dim: int = 512
    dropout: float = 0.1         # each sub-layer's output and the embeddings + PE (Vaswani et al.)
    attention_dropout: float = 0.0   # on the softmaxed attention weights (torch.nn.Transformer's, fairseq's)
    activation_dropout: float = 0.0  # after the feed-forward activation, before its second linear
    max_positions: int = 512     # longest sequence (positions) the model accepts
    pe_positions: int | None = None  # rows of the position-encoding table (None: max_positions; never
                                     # fewer than max_positions). Rows past a sequence's end are never read
    pe_base: float = 10000.0
    pre_ln: bool = False         # False: post-LN, the original transformer
    pos_encoding: bool = True    # Table 3 ablation
    tie_embeddings: bool = False  # decoder-only LM: logits = h @ E^T + b (GPT-2 style), no separate matrix

    def __post_init__(self):
        if self.d_model < 1 or self.layers < 1 or self.ff_dim < 1 or self.heads < 1:
            raise EmbinitError(f"model sizes must be positive, got d_model={self.d_model}, "
                               f"heads={self.heads}, layers={self.layers}, ff_dim={self.ff_dim}")
        if self.d_model % self.heads:
            raise EmbinitError(f"heads={self.heads} does not divide d_model={self.d_model}; choose "
                               f"heads from {divisors(self.d_model)}")
        bad = [f"{name} must be in [0, 1), got {p}" for name, p in (
            ("dropout", self.dropout), ("attention_dropout", self.attention_dropout),
            ("activation_dropout", self.activation_dropout)) if not 0.0 <= p < 1.0]
        if bad:
            raise EmbinitError("; ".join(bad))


class TokenEmbedding(nn.Module):
    """`dropout(E[ids] * sqrt(D) + PE[positions])`. The table is the init library's output, used as
    given: the sqrt(D) scale is applied in the forward pass, as in Vaswani et al."""

    def __init__(self, table: torch.Tensor, cfg: ModelConfig):
        super().__init__()
        if table.dim() != 2 or table.shape[1] != cfg.d_model:
            raise EmbinitError(f"embedding table has shape {tuple(table.shape)} but the model's "
                               f"d_model is {cfg.d_model}")
        self.embedding = nn.Embedding(table.shape[0], table.shape[1])
        with torch.no_grad():
            self.embedding.weight.copy_(table)
        self.scale = math.sqrt(cfg.d_model)
        rows = max(cfg.pe_positions or cfg.max_positions, cfg.max_positions)
        pe = sinusoidal(rows, cfg.d_model, cfg.pe_base) if cfg.pos_encoding else None
        self.max_positions = cfg.max_positions
        self.register_buffer("pe", pe, persistent=False)
        self.drop = FastDropout(cfg.dropout)

    def forward(self, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        x = self.embedding(ids) * self.scale
        if self.pe is not None:
            t = ids.shape[1]
            if offset + t > self.max_positions:
                raise EmbinitError(f"sequence of {offset + t} positions exceeds the model's "
                                   f"max_positions={self.max_positions}")
            x = x + self.pe[offset:offset + t].to(x.dtype)
        return self.drop(x)


def cheap_host_reads(device: torch.device) -> bool:
    """Whether reading a value of a tensor on `device` back to Python is free (CPU: no device queue)."""
    return device.type == "cpu"


def padding_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor | None:
    """Attention mask [B, 1, 1, S] (True = attend) hiding pad keys. On CPU: None when nothing is padded,
    so attention takes its unmasked fast path. On an accelerator the mask is always returned: asking
    whether anything is padded would make the host wait for the device at every forward pass."""
    keep = ids != pad_id
    if cheap_host_reads(ids.device) and bool(keep.all()):
        return None
    return keep[:, None, None, :]
