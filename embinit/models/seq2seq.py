"""Encoder-decoder transformer for translation: separate source and target embeddings (each with its own
init) and a separate output projection (no weight tying)."""

from __future__ import annotations

import torch
from torch import nn

from embinit.models.embedding import ModelConfig, TokenEmbedding, padding_mask
from embinit.models.layers import DecoderLayer, EncoderLayer


class EncoderDecoder(nn.Module):
    kind = "translation"

    def __init__(self, src_table: torch.Tensor, tgt_table: torch.Tensor, cfg: ModelConfig,
                 pad_id: int = 0):
        super().__init__()
        self.cfg, self.pad_id = cfg, pad_id
        self.src_embed = TokenEmbedding(src_table, cfg)
        self.tgt_embed = TokenEmbedding(tgt_table, cfg)
        args = (cfg.d_model, cfg.heads, cfg.ff_dim, cfg.dropout, cfg.pre_ln, cfg.attention_dropout,
                cfg.activation_dropout)
        self.encoder = nn.ModuleList(EncoderLayer(*args) for _ in range(cfg.layers))
        self.decoder = nn.ModuleList(DecoderLayer(*args) for _ in range(cfg.layers))
        # pre-LN stacks end with a LayerNorm (post-LN outputs are already normalized)
        self.enc_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_ln else nn.Identity()
        self.dec_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_ln else nn.Identity()
        self.output = nn.Linear(cfg.d_model, tgt_table.shape[0])

    @classmethod
    def from_tables(cls, tables: dict[str, torch.Tensor], cfg: ModelConfig, num_labels: int, pad_id: int):
        return cls(tables["src"], tables["tgt"], cfg, pad_id)

    def embeddings(self) -> dict[str, nn.Embedding]:
        return {"src": self.src_embed.embedding, "tgt": self.tgt_embed.embedding}

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Memory [B, S, D] and its key mask (None when the batch has no padding)."""
        mask = padding_mask(src, self.pad_id)
        x = self.src_embed(src)
        for layer in self.encoder:
            x = layer(x, mask=mask)
        return self.enc_norm(x), mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, memory_mask) -> torch.Tensor:
        """Decoder hidden states [B, T, D] for a whole (teacher-forced) target prefix."""
        x = self.tgt_embed(tgt_in)
        for layer in self.decoder:
            x = layer(x, memory=memory, memory_mask=memory_mask)
        return self.dec_norm(x)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, mask = self.encode(src)
        return self.output(self.decode(tgt_in, memory, mask))

    # incremental decoding: one new target position per call, earlier keys/values cached
    def start_state(self, memory: torch.Tensor, memory_mask) -> dict:
        return {"memory_mask": memory_mask, "pos": 0,
                "memory_kv": [layer.cross_attn.project_kv(memory) for layer in self.decoder],
                "caches": [{} for _ in self.decoder]}

    def decode_step(self, tokens: torch.Tensor, state: dict) -> torch.Tensor:
        """tokens [B, 1] at position state["pos"] -> logits [B, V]; updates state in place."""
        x = self.tgt_embed(tokens, offset=state["pos"])
        for layer, kv, cache in zip(self.decoder, state["memory_kv"], state["caches"]):
            x = layer(x, memory_mask=state["memory_mask"], memory_kv=kv, cache=cache)
        state["pos"] += 1
        return self.output(self.dec_norm(x))[:, -1]

    def reorder_state(self, state: dict, index: torch.Tensor, memory: bool = True) -> None:
        """Keep rows `index` of every cached tensor (beam search, dropping finished rows). memory=False
        leaves the encoder memory's keys/values and mask as they are, for an `index` that sends every row
        to one of the same source (beam search reordering a sentence's hypotheses: their copies are equal)."""
        if memory:
            state["memory_kv"] = [(k[index], v[index]) for k, v in state["memory_kv"]]
            if state["memory_mask"] is not None:
                state["memory_mask"] = state["memory_mask"][index]
        state["caches"] = [{n: t[index] for n, t in c.items()} for c in state["caches"]]
