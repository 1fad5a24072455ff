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
              cached: bool = True, device="cpu", autocast=None, alpha: float = 0.6) -> list[list[int]]:
    """Token ids (no bos/eos) for each source (given without eos), in input order; `alpha`: beam search's
    length penalty (`length_penalty`)."""
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        src = pad([list(sources[i]) + [EOS_ID] for i in idx]).to(device)
        with autocast or nullcontext():
            if beam_size > 1:
                hyps = beam_search(model, src, beam_size, alpha)
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
           stop_at_eos: bool = True, check_every: int | None = None) -> list[list[int]]:
    """Greedy decoding of a padded source batch, each row up to its own cap (`row_caps`). `steps`
    overrides the cap for every row; with stop_at_eos=False every row runs all `steps` (the benchmark's
    fixed-length mode).

    A row that has emitted eos (or reached its cap) leaves the batch at the next check (every step on the
    CPU, every `EOS_CHECK_EVERY` on an accelerator, where finding the rows syncs; `check_every` sets it): until
    then it is fed padding. Once it leaves, its cached states and
    encoder memory are dropped, so later steps compute only the rows still going. Each row's computation
    never reads another row's, so its tokens do not depend on which rows are still in the batch."""
    memory, mask = model.encode(src)
    b = src.shape[0]
    caps = torch.full((b,), steps, device=src.device) if steps else row_caps(src, model.cfg.max_positions)
    steps = int(caps.max())
    out = torch.full((b, steps), PAD_ID, dtype=torch.long, device=src.device)
    rows = torch.arange(b, device=src.device)            # the batch row each live row came from
    ys = torch.full((b, 1), BOS_ID, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    state = model.start_state(memory, mask) if cached else None
    check = check_every or (1 if src.device.type == "cpu" else EOS_CHECK_EVERY)
    for i in range(steps):
        if cached:
            logits = model.decode_step(ys[:, -1:], state)
        else:
            logits = model.output(model.decode(ys, memory, mask)[:, -1])
        nxt = _no_specials(logits).argmax(-1).masked_fill(done, PAD_ID)
        out[rows, i] = nxt
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= (nxt == EOS_ID) | (caps <= i + 1)
        if not stop_at_eos or (i + 1) % check or i + 1 == steps:
            continue
        keep = (~done).nonzero().squeeze(1)                 # syncs on an accelerator
        if keep.numel() == 0:
            break   # extra steps after every row finished only append padding: the output is the same
        if keep.numel() < rows.numel():
            rows, ys, caps, done = rows[keep], ys[keep], caps[keep], done[keep]
            if cached:
                model.reorder_state(state, keep)
            else:
                memory, mask = memory[keep], (None if mask is None else mask[keep])
    return [_strip(row) for row in out.tolist()]


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016); `length` counts the eos."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(model, src: torch.Tensor, beam: int, alpha: float = 0.6,
                check_every: int | None = None) -> list[list[int]]:
    """Beam search with cached decoder states (fairseq's and Hugging Face's algorithm). Each step ranks
    the `2 * beam` best extensions of a row's live hypotheses: one ending in eos among the `beam` best is
    set aside as finished, scored by its log-probability over `length_penalty(length, alpha)`; the best
    `beam` others stay live. Finished hypotheses never take a live slot, so a long hypothesis is not pruned
    by short finished ones whose raw log-probability is higher. A row stops when no live hypothesis can
    beat its best finished one (a live score only falls, and its penalty is at most that of the longest
    length left) or at its own cap (`row_caps`), where the live hypotheses are finished without eos.
    Returns each row's best finished hypothesis (no bos/eos); of equal scores, the first set aside.

    Every row's bookkeeping is a tensor (rows x beam slots), so a step is the same few operations for any
    batch. A row that has stopped leaves the batch at the next check (every step on the CPU, every
    `EOS_CHECK_EVERY` on an accelerator, where finding the rows syncs; `check_every` sets it), as in
    `greedy`: until then its slots stay empty (score -inf, token pad, parent slot 0); then its result is
    kept and its slots' cached states, encoder memory and bookkeeping are dropped. A row's search never
    reads another row's, so its hypothesis does not depend on which rows are still in the batch."""
    b, dev = src.shape[0], src.device
    caps = row_caps(src, model.cfg.max_positions)
    steps = int(caps.max())
    # the penalty of every length a search can reach, each as `length_penalty` computes it (float64)
    penalties = torch.tensor([length_penalty(n, alpha) for n in range(steps + 2)], dtype=torch.float64, device=dev)
    memory, mask = model.encode(src)
    state = model.start_state(memory, mask)
    model.reorder_state(state, torch.arange(b, device=dev).repeat_interleave(beam))
    scores = torch.full((b, beam), float("-inf"), device=dev)
    scores[:, 0] = 0.0                                     # one live hypothesis (bos) per row at the start
    live = torch.full((b, beam, steps), PAD_ID, dtype=torch.long, device=dev)   # the live hypotheses' tokens
    best = {"score": torch.full((b,), float("-inf"), dtype=torch.float64, device=dev),
            "tokens": torch.full((b, steps), PAD_ID, dtype=torch.long, device=dev)}
    out = best["tokens"].clone()                           # each batch row's result, once it has left
    rows = torch.arange(b, device=dev)                     # the batch row each live row came from
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    last = torch.full((b * beam, 1), BOS_ID, dtype=torch.long, device=dev)
    check = check_every or (1 if dev.type == "cpu" else EOS_CHECK_EVERY)
    for step in range(steps):
        logp = torch.log_softmax(_no_specials(model.decode_step(last, state).float()), dim=-1)
        n, v = scores.shape[0], logp.shape[-1]
        total = (scores.view(-1, 1) + logp).view(n, beam * v)
        top_s, top_i = total.topk(min(2 * beam, beam * v), dim=-1)
        parent, tok = top_i // v, top_i % v
        ok = (top_s > float("-inf")) & ~done[:, None]
        ended = (ok & (tok == EOS_ID))[:, :beam]
        _set_aside(best, top_s[:, :beam], ended, _rows(live, parent[:, :beam]), penalties[step + 1])
        scores, parent, tok, held = _first_live(top_s, parent, tok, ok & (tok != EOS_ID), beam)
        live = _rows(live, parent)
        live[:, :, step] = tok
        at_cap = (caps <= step + 1) & ~done
        _set_aside(best, scores, held & at_cap[:, None], live, penalties[step + 1])
        # a live hypothesis ends with length in [step + 2, cap] and a score <= its current one (<= 0)
        bound = scores[:, 0].double() / torch.maximum(penalties[step + 2], penalties[caps])
        done |= at_cap | (best["score"] >= bound)          # no live one: bound -inf
        keep = None
        if (step + 1) % check == 0:
            keep = (~done).nonzero().squeeze(1)            # syncs on an accelerator
            if keep.numel() == 0:
                break
            if keep.numel() == n:
                keep = None
        held &= ~done[:, None]
        scores = scores.masked_fill(~held, float("-inf"))
        # every slot's parent is a slot of its own row
        index = torch.arange(n, device=dev)[:, None] * beam + parent.masked_fill(~held, 0)
        last = tok.masked_fill(~held, PAD_ID)
        if keep is None:   # the memory's copies are a row's own: equal, so they need no reordering
            model.reorder_state(state, index.view(-1), memory=False)
        else:   # the rows that stopped leave (results kept, slots dropped); the memory follows the same index
            out[rows] = best["tokens"]
            model.reorder_state(state, index[keep].view(-1))
            scores, last, live, caps, done, rows = (t[keep] for t in (scores, last, live, caps, done, rows))
            best = {k: t[keep] for k, t in best.items()}
        last = last.view(-1, 1)
    out[rows] = best["tokens"]
    return [_strip(row) for row in out.tolist()]


def _rows(live: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The tokens [B, K, T] of each row's live hypotheses `slots` [B, K]."""
    return live.gather(1, slots[..., None].expand(-1, -1, live.shape[2]))


def _first_live(top_s, parent, tok, ok, beam: int):
    """The first `beam` candidates (best first) where `ok`: their scores, parent slots and tokens, and
    which slots hold one; an empty slot has score -inf, parent 0 and token pad."""
    pick = torch.argsort((~ok).to(torch.uint8), dim=1, stable=True)[:, :beam]
    held = ok.gather(1, pick)
    return (top_s.gather(1, pick).masked_fill(~held, float("-inf")), parent.gather(1, pick).masked_fill(~held, 0),
            tok.gather(1, pick).masked_fill(~held, PAD_ID), held)


def _set_aside(best: dict, scores: torch.Tensor, ok: torch.Tensor, hyps: torch.Tensor, penalty) -> None:
    """Finish the hypotheses `hyps` [B, K, T] where `ok`, scored `scores` / `penalty`: a row's best so far
    gives way only to a strictly better one, so of equal scores the first finished (earlier step, then
    better rank) stays."""
    norm = torch.where(ok, scores.double() / penalty, float("-inf"))
    top, idx = norm.max(dim=1)                             # max returns the first of equal maxima
    better = top > best["score"]
    best["score"] = torch.where(better, top, best["score"])
    best["tokens"] = torch.where(better[:, None], _rows(hyps, idx[:, None])[:, 0], best["tokens"])
