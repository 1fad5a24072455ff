"""The beam search of embinit/train/decoding.py as of commit 9d63a7c: vectorised across rows, but every row
(a source sentence and its beam slots) stays in the batch until all rows have stopped. Kept as the
reference the search that drops stopped rows must match hypothesis for hypothesis, and as the benchmark's
baseline for that change (bench/bench_beam_search.py --baseline keep_rows)."""

from __future__ import annotations

import torch

from embinit.train.decoding import (BOS_ID, EOS_CHECK_EVERY, EOS_ID, PAD_ID, _no_specials, _strip,
                                    length_penalty, row_caps)


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
