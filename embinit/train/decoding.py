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


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016); `length` counts the eos."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(model, src: torch.Tensor, beam: int, alpha: float = 0.6) -> list[list[int]]:
    """Beam search with cached decoder states (fairseq's and Hugging Face's algorithm). Each step ranks
    the `2 * beam` best extensions of a row's live hypotheses: one ending in eos among the `beam` best is
    set aside as finished, scored by its log-probability over `length_penalty(length, alpha)`; the best
    `beam` others stay live. Finished hypotheses never take a live slot, so a long hypothesis is not pruned
    by short finished ones whose raw log-probability is higher. A row stops when no live hypothesis can
    beat its best finished one (a live score only falls, and its penalty is at most that of the longest
    length left) or at its own cap (`row_caps`), where the live hypotheses are finished without eos.
    Returns each row's best finished hypothesis (no bos/eos)."""
    b, dev = src.shape[0], src.device
    caps = row_caps(src, model.cfg.max_positions).tolist()
    memory, mask = model.encode(src)
    state = model.start_state(memory, mask)
    model.reorder_state(state, torch.arange(b, device=dev).repeat_interleave(beam))
    scores = torch.full((b * beam,), float("-inf"), device=dev)
    scores[::beam] = 0.0                                   # one live hypothesis (bos) per row at the start
    prefixes = [[[] for _ in range(beam)] for _ in range(b)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    done = [False] * b
    last = torch.full((b * beam, 1), BOS_ID, dtype=torch.long, device=dev)
    for step in range(max(caps)):
        logp = torch.log_softmax(_no_specials(model.decode_step(last, state).float()), dim=-1)
        v = logp.shape[-1]
        total = (scores[:, None] + logp).view(b, beam * v)
        top_s, top_i = (t.tolist() for t in total.topk(min(2 * beam, beam * v), dim=-1))
        rows, toks, new_scores = [], [], []
        for r in range(b):
            live = [] if done[r] else _step_row(r, top_s[r], top_i[r], v, beam, prefixes, finished[r], alpha)
            if not done[r]:
                done[r] = _row_done(live, finished[r], step, caps[r], alpha)
            live = [] if done[r] else live
            live += [(float("-inf"), 0, PAD_ID, [])] * (beam - len(live))   # empty slots: never extended
            rows += [r * beam + parent for _, parent, _, _ in live]
            toks += [tok for _, _, tok, _ in live]
            new_scores += [s for s, _, _, _ in live]
            prefixes[r] = [seq for _, _, _, seq in live]
        if all(done):
            break
        model.reorder_state(state, torch.tensor(rows, device=dev))
        last = torch.tensor(toks, device=dev)[:, None]
        scores = torch.tensor(new_scores, device=dev)
    return [max(f, key=lambda h: h[0])[1] if f else [] for f in finished]   # max keeps the first of ties


def _step_row(r: int, top_s: list, top_i: list, v: int, beam: int, prefixes, finished: list, alpha: float):
    """Row r's candidates (best first): eos among the `beam` best goes to `finished`; returns the live
    (score, parent, token, tokens) hypotheses, at most `beam`."""
    live = []
    for rank, (s, i) in enumerate(zip(top_s, top_i)):
        if s == float("-inf"):
            break
        parent, tok = divmod(i, v)
        seq = prefixes[r][parent] + [tok]
        if tok == EOS_ID:
            if rank < beam:
                finished.append((s / length_penalty(len(seq), alpha), seq[:-1]))
        else:
            live.append((s, parent, tok, seq))
            if len(live) == beam:
                break
    return live


def _row_done(live: list, finished: list, step: int, cap: int, alpha: float) -> bool:
    """Whether a row's search is over after `step`: at its cap its live hypotheses are finished as they are
    (no eos); before, when no live one can end better than its best finished one."""
    if step + 1 >= cap:
        finished.extend((s / length_penalty(len(seq), alpha), seq) for s, _, _, seq in live)
        return True
    if not live:
        return True
    if not finished:
        return False
    # a live hypothesis ends with length in [step + 2, cap] and a score <= its current one (<= 0)
    bound = live[0][0] / max(length_penalty(step + 2, alpha), length_penalty(cap, alpha))
    return max(f[0] for f in finished) >= bound
