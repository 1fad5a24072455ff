"""Single-stack transformers: the encoder-only classifier and the decoder-only language model.

Classifier choices (documented because the paper does not fix them):
- pooling: the mean of the final hidden states over non-pad positions (no [CLS] token is needed, so the
  same vocabulary and init serve word-level and sub-word tokenizers);
- sentence pairs (MNLI): one sequence `premise <eos> hypothesis`, the `<eos>` token as separator and no
  segment embeddings, so every embedding parameter comes from the init under study.
"""

from __future__ import annotations

import torch
from torch import nn

from embinit.errors import EmbinitError
from embinit.models.embedding import ModelConfig, TokenEmbedding, padding_mask
from embinit.models.layers import EncoderLayer, FastDropout


class _Stack(nn.Module):
    def __init__(self, table: torch.Tensor, cfg: ModelConfig, pad_id: int):
        super().__init__()
        self.cfg, self.pad_id = cfg, pad_id
        self.embed = TokenEmbedding(table, cfg)
        args = (cfg.d_model, cfg.heads, cfg.ff_dim, cfg.dropout, cfg.pre_ln, cfg.attention_dropout,
                cfg.activation_dropout)
        self.layers = nn.ModuleList(EncoderLayer(*args) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.pre_ln else nn.Identity()

    def embeddings(self) -> dict[str, nn.Embedding]:
        return {"tok": self.embed.embedding}

    def hidden(self, ids: torch.Tensor, causal: bool = False) -> torch.Tensor:
        mask = None if causal else padding_mask(ids, self.pad_id)
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, mask=mask, causal=causal)
        return self.norm(x)


class EncoderClassifier(_Stack):
    kind = "classification"

    def __init__(self, table: torch.Tensor, cfg: ModelConfig, num_labels: int, pad_id: int = 0):
        super().__init__(table, cfg, pad_id)
        self.drop = FastDropout(cfg.dropout)
        self.head = nn.Linear(cfg.d_model, num_labels)

    @classmethod
    def from_tables(cls, tables: dict[str, torch.Tensor], cfg: ModelConfig, num_labels: int, pad_id: int):
        if num_labels < 2:
            raise EmbinitError(f"a classifier needs at least 2 labels, got {num_labels}")
        return cls(tables["tok"], cfg, num_labels, pad_id)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] (pairs already joined with <eos>) -> logits [B, num_labels]."""
        h = self.hidden(ids)
        keep = (ids != self.pad_id).unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(self.drop(pooled))


class TiedOutput(nn.Module):
    """The output layer of a tied LM: logits = h @ E^T + b with E the token table. E stays owned by the
    input layer (it is not registered here), so the state dict has it once and the bias as `output.bias`."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        object.__setattr__(self, "_embedding", embedding)   # a reference, not a submodule
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(h, self._embedding.weight, self.bias)


class DecoderLM(_Stack):
    """Causal self-attention only (no cross-attention). Output layer: a separate projection (default),
    or with `cfg.tie_embeddings` the token table itself, logits = h @ E^T + b as in GPT-2 (the table
    then gets gradients from every softmax, so rows of tokens never seen as input move too; it is one
    parameter, so freezing or re-initializing the embeddings covers the output layer as well)."""

    kind = "lm"

    def __init__(self, table: torch.Tensor, cfg: ModelConfig, pad_id: int = 0):
        super().__init__(table, cfg, pad_id)
        self.output = TiedOutput(self.embed.embedding) if cfg.tie_embeddings else \
            nn.Linear(cfg.d_model, table.shape[0])

    @classmethod
    def from_tables(cls, tables: dict[str, torch.Tensor], cfg: ModelConfig, num_labels: int, pad_id: int):
        return cls(tables["tok"], cfg, pad_id)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> next-token logits [B, T, V]."""
        return self.output(self.hidden(ids, causal=True))
