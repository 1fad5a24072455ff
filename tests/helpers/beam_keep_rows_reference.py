"""The beam search of embinit/train/decoding.py as of commit 9d63a7c: vectorised across rows, but every row
(a source sentence and its beam slots) stays in the batch until all rows have stopped. Kept as the
reference the search that drops stopped rows must match hypothesis for hypothesis, and as the benchmark's
baseline for that change (bench/bench_beam_search.py --baseline keep_rows)."""

from __future__ import annotations

import torch

# the per-step pieces the change left as they were (choosing live candidates, finishing hypotheses) are the
# module's own: only the batch's handling of stopped rows differs
from embinit.train.decoding import (BOS_ID, EOS_CHECK_EVERY, EOS_ID, PAD_ID, _first_live, _no_specials, _rows,
                                    _set_aside, _strip, length_penalty, row_caps)


def beam_search(model, src: torch.Tensor, beam: int, alpha: float = 0.6) -> list[list[int]]:
    """`embinit.train.decoding.beam_search` as it was (see its docstring): a stopped row's slots stay empty
    (score -inf, token pad, parent slot 0) until every row has stopped."""
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
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    last = torch.full((b * beam, 1), BOS_ID, dtype=torch.long, device=dev)
    first_slot = torch.arange(b, device=dev)[:, None] * beam
    check = 1 if dev.type == "cpu" else EOS_CHECK_EVERY
    for step in range(steps):
        logp = torch.log_softmax(_no_specials(model.decode_step(last, state).float()), dim=-1)
        v = logp.shape[-1]
        total = (scores.view(-1, 1) + logp).view(b, beam * v)
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
        if (step + 1) % check == 0 and bool(done.all()):
            break
        held &= ~done[:, None]
        scores = scores.masked_fill(~held, float("-inf"))
        # every slot's parent is a slot of its own row: the memory's copies need no reordering
        model.reorder_state(state, (first_slot + parent.masked_fill(~held, 0)).view(-1), memory=False)
        last = tok.masked_fill(~held, PAD_ID).view(-1, 1)
    return [_strip(row) for row in best["tokens"].tolist()]

