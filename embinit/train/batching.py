"""Batches: length-bucketed (little padding), seeded order, padded tensors.

Training batches are cut from pools of `pool_factor` batches' worth of examples sorted by length, and
the batch order is shuffled with the trial's generator: almost no padding, and still a different
mixture of lengths each epoch (equal lengths are tie-broken by the shuffled order, so batches differ
between epochs). Source/target pairs sort by (longer side, source, target): on Multi30k's training
lengths this gives ~97% real tokens with 64-pair batches and pools of 200 batches (sorting by source
then target: ~95%; unsorted random batches: ~55%). Batches hold a fixed number of examples (`batch_size`, the paper's
setting) or as many as fit a token budget (`max_tokens`, counted as padded tokens per side).
"""

from __future__ import annotations

from typing import Sequence

import torch

from embinit.errors import EmbinitError


def bucket_batches(lengths: Sequence, batch_size: int | None = None, max_tokens: int | None = None,
                   generator: torch.Generator | None = None, pool_factor: int = 200) -> list[list[int]]:
    """Index lists of batches. `lengths[i]` is an int or a tuple of lengths (e.g. source, target). With a generator,
    the examples are shuffled before pooling and the batch order is shuffled; without one, the order is deterministic
    (evaluation)."""
    if not batch_size and not max_tokens:
        raise EmbinitError("batching needs batch_size or max_tokens")
    n = len(lengths)
    order = torch.randperm(n, generator=generator).tolist() if generator is not None else list(range(n))
    pool = (batch_size or max(1, max_tokens // 16)) * pool_factor
    batches: list[list[int]] = []
    for start in range(0, n, pool):
        chunk = sorted(order[start:start + pool], key=lambda i: _sort_key(lengths[i]))
        batches.extend(_cut(chunk, lengths, batch_size, max_tokens))
    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


def _sort_key(length):
    return (max(length), *length) if isinstance(length, tuple) else length


def _longest(length) -> int:
    return max(length) if isinstance(length, tuple) else length


def _cut(sorted_idx: list[int], lengths, batch_size, max_tokens) -> list[list[int]]:
    if batch_size:
        return [sorted_idx[i:i + batch_size] for i in range(0, len(sorted_idx), batch_size)]
    out, cur, longest = [], [], 0
    for i in sorted_idx:
        m = max(longest, _longest(lengths[i]))
        if cur and m * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur, m = [], _longest(lengths[i])
        cur.append(i)
        longest = m
    if cur:
        out.append(cur)
    return out


def pad(seqs: Sequence[Sequence[int]], pad_id: int = 0) -> torch.Tensor:
    """Right-padded LongTensor [len(seqs), longest]."""
    longest = max(len(s) for s in seqs)   # one tensor from lists: ~3x faster than filling row by row
    return torch.tensor([list(s) + [pad_id] * (longest - len(s)) for s in seqs], dtype=torch.long)


def lm_chunks(stream: Sequence[int], seq_len: int) -> torch.Tensor:
    """Non-overlapping rows of seq_len + 1 tokens (input = row[:-1], target = row[1:]); consecutive rows
    share one token so every token after the first is predicted exactly once. The last short row is
    right-padded with -1 (ignored by the loss)."""
    ids = torch.as_tensor(stream, dtype=torch.long)
    if ids.numel() < 2:
        raise EmbinitError(f"language-model split has {ids.numel()} tokens; need at least 2")
    n = (ids.numel() - 2) // seq_len + 1
    out = torch.full((n, seq_len + 1), -1, dtype=torch.long)
    for r in range(n):
        row = ids[r * seq_len:r * seq_len + seq_len + 1]
        out[r, :row.numel()] = row
    return out


# fused steps: the members' batches of one step as one padded group batch (embinit.train.fused_group) ---
def stack_padded(tensors: Sequence[torch.Tensor], value: int) -> torch.Tensor:
    """[G, *longest]: member g's tensor in the leading corner, `value` elsewhere (the group's longest
    batch and sequence)."""
    shape = [max(t.shape[d] for t in tensors) for d in range(tensors[0].dim())]
    out = torch.full((len(tensors), *shape), value, dtype=tensors[0].dtype)
    for g, t in enumerate(tensors):
        out[(g, *(slice(0, s) for s in t.shape))] = t
    return out


def flat_targets(batches: Sequence[dict], own_width: str, width: int, ignore: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each member's real target positions (`keep`, flat in its own [rows, batch[own_width].shape[1]]
    layout) moved to the padded [rows, width] layout, and their ids (`targets`), as [G, L] with L the
    longest count; a shorter member's tail is position 0 with target `ignore`. From the host batches."""
    longest = max(b["n_targets"] for b in batches)
    rows = torch.zeros(len(batches), longest, dtype=torch.long)
    targets = torch.full((len(batches), longest), ignore, dtype=torch.long)
    for g, b in enumerate(batches):
        n, own = b["n_targets"], b[own_width].shape[1]
        rows[g, :n] = b["keep"] // own * width + b["keep"] % own
        targets[g, :n] = b["targets"]
    return rows, targets
