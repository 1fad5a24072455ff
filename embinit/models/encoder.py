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

from embinit.models.embedding import ModelConfig, TokenEmbedding, padding_mask
from embinit.models.layers import EncoderLayer, FastDropout


class _Stack(nn.Module):
    def __init__(self, table: torch.Tensor, cfg: ModelConfig, pad_id: int):
        super().__init__()
        self.cfg, self.pad_id = cfg, pad_id
        self.embed = TokenEmbedding(table, cfg)
        args = (cfg.d_model, cfg.heads, cfg.ff_dim, cfg.dropout, cfg.pre_ln)
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

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] (pairs already joined with <eos>) -> logits [B, num_labels]."""
        h = self.hidden(ids)
        keep = (ids != self.pad_id).unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(self.drop(pooled))


class DecoderLM(_Stack):
    """Causal self-attention only (no cross-attention); a separate output projection."""

    kind = "lm"

    def __init__(self, table: torch.Tensor, cfg: ModelConfig, pad_id: int = 0):
        super().__init__(table, cfg, pad_id)
        self.output = nn.Linear(cfg.d_model, table.shape[0])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> next-token logits [B, T, V]."""
        return self.output(self.hidden(ids, causal=True))
