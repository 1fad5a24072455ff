"""A group of same-shape encoder-decoders trained as one model (embinit.models.stacked).

    fused = FusedEncoderDecoder([model_a, model_b], generators=[g_a, g_b])
    losses = fused.losses(src, tgt_in, rows, targets, src_shapes, tgt_shapes)   # [G]: one per member
    fused.write_back()                                    # stacked weights -> the members

Per member, the computation is the member's own `EncoderDecoder` forward: the same weights, the same
dropout masks (drawn from the member's generator for the member's own batch shape, then padded), the
same loss. Only the float summation order of the batched kernels differs.
"""

from __future__ import annotations

import torch

from embinit.models.stacked import IGNORE, StackedModel

__all__ = ["IGNORE", "FusedEncoderDecoder"]


class FusedEncoderDecoder(StackedModel):
    """G `EncoderDecoder`s of one shape."""

    def __init__(self, members, generators: list[torch.Generator]):
        super().__init__(members, generators, pe_of="src_embed")

    def encode(self, src: torch.Tensor, shapes) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = self._key_mask(src)
        x = self._embed(src, "src_embed", shapes)
        for i in range(self.cfg.layers):
            x = self._encoder_layer(x, f"encoder.{i}", shapes, mask=mask)
        return (self._norm(x, "enc_norm") if self.cfg.pre_ln else x), mask

    def decode(self, tgt_in, memory, mask, shapes, memory_shapes) -> torch.Tensor:
        """shapes / memory_shapes: each member's own (rows, length) of its target / source batch."""
        x = self._embed(tgt_in, "tgt_embed", shapes)
        for i in range(self.cfg.layers):
            n = f"decoder.{i}"
            x = self._residual(x, n + ".res1",
                               lambda h, n=n: self._attend(h, n + ".self_attn", shapes, causal=True), shapes)
            x = self._residual(x, n + ".res2",
                               lambda h, n=n: self._attend(h, n + ".cross_attn", shapes, mask=mask, memory=memory,
                                                           memory_shapes=memory_shapes), shapes)
            x = self._residual(x, n + ".res3", lambda h, n=n: self._ff(h, n + ".ff", shapes), shapes)
        return self._norm(x, "dec_norm") if self.cfg.pre_ln else x

    def losses(self, src, tgt_in, rows, targets, src_shapes, tgt_shapes) -> torch.Tensor:
        """Per-member mean cross-entropy over its real target tokens, [G]. src/tgt_in: [G, B, S|T],
        padded; rows: [G, L] each member's target positions in the flat padded [B*T] layout, targets:
        [G, L] their ids, IGNORE past the member's count (both built on the host, so no size is read
        from the device); *_shapes: each member's own (rows, length). The output layer runs on those
        positions only."""
        memory, mask = self.encode(src, src_shapes)
        hidden = self.decode(tgt_in, memory, mask, tgt_shapes, src_shapes)
        return self._mean_losses(self._linear(self._pick(hidden, rows).unsqueeze(1), "output").squeeze(1), targets)
