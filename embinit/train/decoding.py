"""Greedy and beam-search decoding for the encoder-decoder.

Greedy decoding runs in one of two modes that produce the same tokens: `cached=True` feeds one new
token per step and reuses the decoder's earlier keys/values and the encoder memory's cross-attention
keys/values (O(T) work per step); `cached=False` re-runs the decoder on the whole prefix each step
(O(T^2)), kept as the reference and for the benchmark.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Sequence

import torch

from embinit.train.batching import pad
from embinit.vocab import BOS, EOS, SPECIALS

BOS_ID, EOS_ID, PAD_ID = SPECIALS.index(BOS), SPECIALS.index(EOS), 0
EOS_CHECK_EVERY = 8   # greedy steps between "all rows done?" reads on an accelerator (each read syncs)


def max_decode_len(src_len: int, limit: int) -> int:
    """Output length cap: 1.5 x the source (its eos counted) plus 10, within the model's position table."""
    return max(1, min(limit - 1, int(src_len * 1.5) + 10))


def row_caps(src: torch.Tensor, limit: int) -> torch.Tensor:
    """Each row's own output cap, from its source length without the padding: a row that never emits eos
    ends at a length that does not depend on the rows batched with it (the batch size, the device's
    batching), so a trial's BLEU does not either."""
    lengths = (src != PAD_ID).sum(dim=1).tolist()
    return torch.tensor([max_decode_len(n, limit) for n in lengths], device=src.device)


@torch.no_grad()
def translate(model, sources: Sequence[Sequence[int]], beam_size: int = 1, batch_size: int = 128,
              cached: bool = True, device="cpu", autocast=None) -> list[list[int]]:
    """Token ids (no bos/eos) for each source (given without eos), in input order."""
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        src = pad([list(sources[i]) + [EOS_ID] for i in idx]).to(device)
        with autocast or nullcontext():
            if beam_size > 1:
                hyps = beam_search(model, src, beam_size)
            else:
                hyps = greedy(model, src, cached=cached)
        for i, h in zip(idx, hyps):
            out[i] = h
    return out


def _no_specials(logits: torch.Tensor) -> torch.Tensor:
    """Generation never produces <pad> or <bos>."""
    logits[:, PAD_ID] = float("-inf")
    logits[:, BOS_ID] = float("-inf")
    return logits


def _strip(row: list[int]) -> list[int]:
    """The tokens before eos; a row that reached its cap without one is followed by padding, never generated."""
    row = row[:row.index(EOS_ID)] if EOS_ID in row else row
    return [t for t in row if t != PAD_ID]


def greedy(model, src: torch.Tensor, cached: bool = True, steps: int | None = None,
           stop_at_eos: bool = True) -> list[list[int]]:
    """Greedy decoding of a padded source batch, each row up to its own cap (`row_caps`). `steps`
    overrides the cap for every row; with stop_at_eos=False every row runs all `steps` (the benchmark's
    fixed-length mode)."""
    memory, mask = model.encode(src)
    b = src.shape[0]
    caps = torch.full((b,), steps, device=src.device) if steps else row_caps(src, model.cfg.max_positions)
    steps = int(caps.max())
    ys = torch.full((b, 1), BOS_ID, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    state = model.start_state(memory, mask) if cached else None
    check = 1 if src.device.type == "cpu" else EOS_CHECK_EVERY
    for i in range(steps):
        if cached:
            logits = model.decode_step(ys[:, -1:], state)
        else:
            logits = model.output(model.decode(ys, memory, mask)[:, -1])
        nxt = _no_specials(logits).argmax(-1).masked_fill(done, PAD_ID)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= (nxt == EOS_ID) | (caps <= i + 1)
        if stop_at_eos and (i + 1) % check == 0 and bool(done.all()):
            break   # extra steps after every row finished only append padding: the output is the same
    return [_strip(row[1:]) for row in ys.tolist()]


def beam_search(model, src: torch.Tensor, beam: int, alpha: float = 0.6) -> list[list[int]]:
    """Beam search with cached decoder states; hypotheses ranked by log-probability divided by the
    GNMT length penalty ((5 + length) / 6) ** alpha. A row's hypotheses end at its own cap (`row_caps`)."""
    b, dev = src.shape[0], src.device
    caps = row_caps(src, model.cfg.max_positions).repeat_interleave(beam)
    memory, mask = model.encode(src)
    state = model.start_state(memory, mask)
    model.reorder_state(state, torch.arange(b, device=dev).repeat_interleave(beam))
    scores = torch.full((b, beam), float("-inf"), device=dev)
    scores[:, 0] = 0.0
    ys = torch.full((b * beam, 1), BOS_ID, dtype=torch.long, device=dev)
    finished = torch.zeros(b * beam, dtype=torch.bool, device=dev)
    lengths = torch.zeros(b * beam, device=dev)
    for step in range(int(caps.max())):
        logp = torch.log_softmax(_no_specials(model.decode_step(ys[:, -1:], state).float()), dim=-1)
        # a finished hypothesis can only be extended by padding, at no cost
        logp[finished] = float("-inf")
        logp[finished, PAD_ID] = 0.0
        total = (scores.view(-1, 1) + logp).view(b, -1)
        scores, flat = total.topk(beam, dim=-1)
        v = logp.shape[-1]
        rows = (torch.arange(b, device=dev)[:, None] * beam + flat // v).view(-1)
        tok = (flat % v).view(-1)
        model.reorder_state(state, rows)
        ys = torch.cat([ys[rows], tok[:, None]], dim=1)
        lengths = lengths[rows] + (~finished[rows]).float()
        finished = finished[rows] | (tok == EOS_ID) | (caps <= step + 1)
        if bool(finished.all()):
            break
    norm = scores.view(-1) / ((5.0 + lengths) / 6.0) ** alpha
    best = norm.view(b, beam).argmax(-1) + torch.arange(b, device=dev) * beam
    return [_strip([t for t in ys[r, 1:].tolist() if t != PAD_ID]) for r in best.tolist()]
