"""The greedy decoding of embinit/train/decoding.py as of commit 4e37ba7: every row stays in the batch until
all have ended (an ended row is fed padding). Kept as the reference the greedy that drops ended rows must
match token for token, and as the benchmark's baseline (bench/bench_beam_search.py, beam 1)."""

from __future__ import annotations

import torch

from embinit.train.decoding import BOS_ID, EOS_ID, PAD_ID, _no_specials, _strip, row_caps


def greedy(model, src: torch.Tensor, beam: int = 1) -> list[list[int]]:
    """`embinit.train.decoding.greedy` (cached) as it was; `beam` is ignored (the benchmark's signature)."""
    memory, mask = model.encode(src)
    b = src.shape[0]
    caps = row_caps(src, model.cfg.max_positions)
    ys = torch.full((b, 1), BOS_ID, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    state = model.start_state(memory, mask)
    for i in range(int(caps.max())):
        nxt = _no_specials(model.decode_step(ys[:, -1:], state)).argmax(-1).masked_fill(done, PAD_ID)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= (nxt == EOS_ID) | (caps <= i + 1)
        if bool(done.all()):
            break
    return [_strip(row[1:]) for row in ys.tolist()]
