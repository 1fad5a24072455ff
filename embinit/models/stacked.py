"""The building blocks of a fused model: G same-shape members' weights stacked over a leading group
dimension, every matrix multiply one batched `baddbmm`, attention over G x B rows at once. The fused
models (embinit.models.fused: translation; embinit.models.fused_encoder: classification, LM) are these
blocks put together in their member's order.

Activations are [G, B, ...]: member g's batch padded to the group's longest batch (rows) and
sequence. Padded positions are masked as keys, dropped to zero and never enter a loss.

Why not `torch.func.vmap`: the trainer's dropout draws from one explicit generator per trial, the
padding mask is skipped when a batch has no padding (a data-dependent branch) and the output layer
runs only on non-pad positions (a data-dependent shape); vmap supports none of the three.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from embinit.errors import EmbinitError
from embinit.models import embedding
from embinit.models.layers import FastDropout, attend, causal_mask, keep_lanes

# The dropout sites of a member (ModelConfig fields): each sub-layer's output and the embeddings (`dropout`),
# the softmaxed attention weights (`attention_dropout`), the feed-forward activation (`activation_dropout`).
# A group's members share each rate (`run_fused` groups only members of one ModelConfig).
SITES = ("dropout", "attention_dropout", "activation_dropout")

IGNORE = -100   # the target id of a padded position or row of a member (never a loss term)


def _flat(name: str) -> str:
    return name.replace(".", "__")


class StackedModel(nn.Module):
    """G models of one shape as stacked parameters `[G, ...]` (names as in the members, dots as `__`).
    `members` keep their own modules; `write_back` copies the trained weights into them. `pe_of`
    names the member module holding the position-encoding buffer."""

    def __init__(self, members: list[nn.Module], generators: list[torch.Generator], pe_of: str):
        super().__init__()
        if not members or len(generators) != len(members):
            raise EmbinitError("a fused model needs one dropout generator per member")
        first = members[0]
        self.cfg, self.pad_id, self.G = first.cfg, first.pad_id, len(members)
        shapes = {n: p.shape for n, p in first.named_parameters()}
        for i, m in enumerate(members[1:], 1):
            theirs = {n: p.shape for n, p in m.named_parameters()}
            if theirs != shapes or m.cfg != first.cfg or type(m) is not type(first):
                raise EmbinitError(f"member {i} differs in shape from member 0; only same-shape models fuse")
        self.members, self.generators = list(members), list(generators)
        self.names = [n for n, _ in first.named_parameters()]
        for n in self.names:
            stacked = torch.stack([dict(m.named_parameters())[n].detach() for m in members]).clone()
            p = nn.Parameter(stacked, requires_grad=dict(first.named_parameters())[n].requires_grad)
            self.register_parameter(_flat(n), p)
        self.register_buffer("pe", getattr(first, pe_of).pe, persistent=False)
        self.rates = {}   # site -> (p, effective p); each site's threshold is the buffer `threshold_<site>`
        for site in SITES:
            drop = FastDropout(getattr(first.cfg, site))
            self.rates[site] = (drop.p, drop.effective_p)
            self.register_buffer(f"threshold_{site}", drop.threshold, persistent=False)

    # the stacked parameters, in the members' parameter order ------------------------------------
    def stacked(self) -> list[nn.Parameter]:
        return [getattr(self, _flat(n)) for n in self.names]

    def _w(self, name: str) -> torch.Tensor:
        return getattr(self, _flat(name))

    @torch.no_grad()
    def write_back(self, only: int | None = None) -> None:
        """Copy every member's (or member `only`'s) slice of the stacked weights into its own module."""
        members = list(enumerate(self.members)) if only is None else [(only, self.members[only])]
        for n in self.names:
            w = self._w(n)
            for g, m in members:
                dict(m.named_parameters())[n].copy_(w[g])

    # batched building blocks -------------------------------------------------------------------------
    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return self._matmul(x, self._w(name + ".weight"), self._w(name + ".bias"))

    @staticmethod
    def _matmul(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """x [G, ..., D] @ w[g]^T + b[g] per member, as `nn.Linear` / `F.linear` computes it."""
        g, out = x.shape[0], w.shape[1]
        y = torch.baddbmm(b.unsqueeze(1).to(x.dtype), x.reshape(g, -1, x.shape[-1]),
                          w.transpose(1, 2).to(x.dtype))
        return y.view(*x.shape[:-1], out)

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w, b = self._w(name + ".weight"), self._w(name + ".bias")
        y = F.layer_norm(x, x.shape[-1:])
        extra = (None,) * (x.dim() - 2)
        return y * w[(slice(None), *extra)] + b[(slice(None), *extra)]

    def _drop(self, x: torch.Tensor, shapes: list[tuple[int, ...]], site: str = "dropout") -> torch.Tensor:
        """Each member's FastDropout mask (of `site`'s rate, SITES) for its own leading shape ((rows,
        length) of a sequence batch, (rows,) of pooled vectors, (rows, heads, queries, keys) of attention
        weights; the dimensions after it are the group's, whole), drawn from its own generator in the
        member's forward order.

        The kernels do not grow with G, bar one draw per member (each from its own generator): the
        members' draws go to slices of one buffer (a slice draws what a fresh tensor of its size would),
        one comparison makes every keep bit, and the mask is those bits in place when every member fills
        the padded shape (no padding), else one copy per member into a zero mask."""
        p, effective_p = self.rates[site]
        if not self.training or p == 0.0:
            return x
        lead = len(shapes[0])
        full, tail = tuple(x.shape[1:1 + lead]), tuple(x.shape[1 + lead:])
        sizes = [math.prod(tail) * math.prod(shape) for shape in shapes]
        words = [(n + 3) // 4 for n in sizes]                   # 4 int16 lanes per 64-bit draw
        draws = torch.empty(sum(words), dtype=torch.int64, device=x.device)
        start = 0
        for g, w in enumerate(words):
            draws[start:start + w].random_(generator=self.generators[g])
            start += w
        keep = keep_lanes(draws, getattr(self, f"threshold_{site}"))
        scale = 1.0 / (1.0 - effective_p)
        if all(shape == full for shape in shapes) and sizes[0] % 4 == 0:
            return x * keep.view(x.shape).to(x.dtype).mul_(scale)
        mask = x.new_zeros(x.shape)
        lane = 0
        for g, (shape, n, w) in enumerate(zip(shapes, sizes, words)):
            mask[(g, *(slice(0, s) for s in shape))] = keep[lane:lane + n].view(*shape, *tail)
            lane += 4 * w
        return x * mask.mul_(scale)

    def _embed(self, ids: torch.Tensor, name: str, shapes) -> torch.Tensor:
        """`TokenEmbedding` of member module `name`: dropout(E[ids] * sqrt(D) + PE)."""
        table = self._w(f"{name}.embedding.weight")           # [G, V, D]
        g, v, d = table.shape
        offset = (torch.arange(g, device=ids.device) * v).view(g, 1, 1)
        x = F.embedding(ids + offset, table.reshape(g * v, d)) * (d ** 0.5)
        if self.pe is not None:
            if ids.shape[2] > self.cfg.max_positions:
                raise EmbinitError(f"sequence of {ids.shape[2]} positions exceeds the model's "
                                   f"max_positions={self.cfg.max_positions}")
            x = x + self.pe[:ids.shape[2]].to(x.dtype)
        return self._drop(x, shapes)

    def _attend(self, x, name: str, shapes, mask=None, causal=False, memory=None,
                memory_shapes=None) -> torch.Tensor:
        """`layers.Attention`; `shapes` (and `memory_shapes` for cross-attention): each member's own
        (rows, length) of the queries (and keys), for its attention-dropout mask."""
        g, b, t, d = x.shape
        h = self.cfg.heads
        if memory is None:
            s, memory_shapes = t, shapes
            q, k, v = self._linear(x, name + ".qkv").view(g * b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        else:
            s = memory.shape[2]
            q = self._linear(x, name + ".q").view(g * b, t, h, d // h).transpose(1, 2)
            k, v = self._linear(memory, name + ".kv").view(g * b, s, 2, h, d // h).permute(2, 0, 3, 1, 4)
        own = [(rows, h, length, keys) for (rows, length), (_, keys) in zip(shapes, memory_shapes)]

        def drop(weights: torch.Tensor) -> torch.Tensor:   # [G*B, H, T, S]: each member's mask for its own part
            return self._drop(weights.view(g, b, h, t, s), own, "attention_dropout").view(g * b, h, t, s)

        on = self.training and self.rates["attention_dropout"][0] > 0.0
        # the separate model's kernel choice (`Attention.forward`)
        mask, causal = causal_mask(mask, causal, q.shape[-2], k.shape[-2])
        y = attend(q, k, v, mask, causal, drop=drop if on else None)
        return self._linear(y.transpose(1, 2).reshape(g, b, t, d), name + ".out")

    def _residual(self, x, name: str, f, shapes) -> torch.Tensor:
        if self.cfg.pre_ln:
            return x + self._drop(f(self._norm(x, name + ".norm")), shapes)
        return self._norm(x + self._drop(f(x), shapes), name + ".norm")

    def _ff(self, x, name: str, shapes) -> torch.Tensor:
        hidden = self._drop(F.relu(self._linear(x, name + ".fc1")), shapes, "activation_dropout")
        return self._linear(hidden, name + ".fc2")

    def _encoder_layer(self, x, name: str, shapes, mask=None, causal=False) -> torch.Tensor:
        """`layers.EncoderLayer` (self-attention, then feed-forward)."""
        x = self._residual(x, name + ".res1",
                           lambda h: self._attend(h, name + ".attn", shapes, mask=mask, causal=causal), shapes)
        return self._residual(x, name + ".res2", lambda h: self._ff(h, name + ".ff", shapes), shapes)

    def _key_mask(self, ids: torch.Tensor) -> torch.Tensor | None:
        """[G*B, 1, 1, S], True = attend; a row of padding only (a member's batch has fewer rows than
        the group's longest) attends to its first position, so no softmax row is all -inf. On CPU None
        when nothing is padded; on an accelerator always a mask (asking would wait for the device)."""
        keep = ids != self.pad_id
        if embedding.cheap_host_reads(ids.device) and bool(keep.all()):
            return None
        empty = ~keep.any(-1, keepdim=True)
        keep = keep.clone()
        keep[..., :1] |= empty
        return keep.reshape(-1, 1, 1, ids.shape[-1])

    @staticmethod
    def _mean_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-member mean cross-entropy over its real targets, [G]: logits [G, N, C], targets [G, N]
        with IGNORE where a member has no target."""
        g = logits.shape[0]
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none",
                             ignore_index=IGNORE).view(g, -1)
        return ce.sum(1) / (targets != IGNORE).sum(1).clamp(min=1)

    @staticmethod
    def _pick(hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """hidden [G, B, T, D] at each member's flat positions rows [G, L] -> [G, L, D]."""
        g, b, t, d = hidden.shape
        return torch.gather(hidden.reshape(g, b * t, d), 1, rows.unsqueeze(-1).expand(-1, -1, d))
