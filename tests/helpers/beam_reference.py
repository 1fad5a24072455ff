"""The beam search of embinit/train/decoding.py as of commit 5dafea0: a Python loop over a batch's rows at
every step, kept as the reference the vectorised search must match hypothesis for hypothesis (ties
broken the same way) and as the benchmark's baseline (bench/bench_beam_search.py)."""

from __future__ import annotations

import torch

from embinit.train.decoding import BOS_ID, EOS_ID, PAD_ID, _no_specials, length_penalty, row_caps


def beam_search(model, src: torch.Tensor, beam: int, alpha: float = 0.6) -> list[list[int]]:
    """`embinit.train.decoding.beam_search` as it was (see its docstring), row by row in Python."""
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
