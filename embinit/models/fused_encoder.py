"""Groups of same-shape single-stack models trained as one (embinit.models.stacked): the encoder-only
classifier and the decoder-only language model of embinit.models.encoder.

    fused = FusedClassifier([clf_a, clf_b], generators=[g_a, g_b])
    losses = fused.losses(ids, labels, shapes)              # [G]: each member's mean cross-entropy
    fused = FusedLM([lm_a, lm_b], generators=[g_a, g_b])
    losses = fused.losses(inputs, rows, targets, shapes)

Per member, the computation is the member's own forward: the same weights, the same dropout masks (the
embedding's, each sub-layer's and, for the classifier, the pooled vector's, drawn from the member's
generator in that order for the member's own batch shape), the same loss. Only the float summation order
of the batched kernels differs.
"""

from __future__ import annotations

import torch

from embinit.models.stacked import StackedModel


class _FusedStack(StackedModel):
    """The `_Stack` body: embedding, encoder layers, the final LayerNorm of a pre-LN stack."""

    def __init__(self, members, generators: list[torch.Generator]):
        super().__init__(members, generators, pe_of="embed")

    def hidden(self, ids: torch.Tensor, shapes, causal: bool = False) -> torch.Tensor:
        mask = None if causal else self._key_mask(ids)
        x = self._embed(ids, "embed", shapes)
        for i in range(self.cfg.layers):
            x = self._encoder_layer(x, f"layers.{i}", shapes, mask=mask, causal=causal)
        return self._norm(x, "norm") if self.cfg.pre_ln else x


class FusedClassifier(_FusedStack):
    """G `EncoderClassifier`s: mean pooling over non-pad positions, dropout, the linear head."""

    def losses(self, ids: torch.Tensor, labels: torch.Tensor, shapes) -> torch.Tensor:
        """ids [G, B, T] padded (pairs already joined), labels [G, B] with IGNORE on a member's padded
        rows; shapes: each member's own (rows, length). -> [G] mean cross-entropy per member."""
        h = self.hidden(ids, shapes)
        keep = (ids != self.pad_id).unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(2) / keep.sum(2).clamp(min=1.0)
        pooled = self._drop(pooled, [(rows,) for rows, _ in shapes])
        return self._mean_losses(self._linear(pooled, "head"), labels)


class FusedLM(_FusedStack):
    """G `DecoderLM`s: causal self-attention, the output layer on real target positions only, a separate
    projection or (cfg.tie_embeddings) the token table itself."""

    def losses(self, inputs: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor, shapes) -> torch.Tensor:
        """inputs [G, B, T] padded; rows [G, L] each member's target positions in the flat padded [B*T]
        layout and targets [G, L] their ids, IGNORE past the member's count (built on the host)."""
        picked = self._pick(self.hidden(inputs, shapes, causal=True), rows)
        if self.cfg.tie_embeddings:
            logits = self._matmul(picked, self._w("embed.embedding.weight"), self._w("output.bias"))
        else:
            logits = self._linear(picked, "output")
        return self._mean_losses(logits, targets)
