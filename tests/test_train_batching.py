"""Batching: every example exactly once, seeded order, little padding, token budgets, LM chunks."""

import random

import torch

from embinit.train.batching import bucket_batches, lm_chunks, pad


def lengths(n=12800, seed=0):
    """Source/target lengths shaped like Multi30k's: mean ~12, correlated sides."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = max(2, int(rng.gauss(12, 4)))
        out.append((s, max(2, s + rng.randint(-3, 3))))
    return out


def test_every_example_once_and_seeded_order():
    lens = lengths()
    a = bucket_batches(lens, batch_size=64, generator=torch.Generator().manual_seed(1))
    b = bucket_batches(lens, batch_size=64, generator=torch.Generator().manual_seed(1))
    c = bucket_batches(lens, batch_size=64, generator=torch.Generator().manual_seed(2))
    assert sorted(i for batch in a for i in batch) == list(range(len(lens)))
    assert a == b and a != c
    assert all(len(batch) <= 64 for batch in a)


def test_bucketed_batches_are_at_least_95_percent_tokens():
    lens = lengths()
    batches = bucket_batches(lens, batch_size=64, generator=torch.Generator().manual_seed(0))
    real = sum(s + t for s, t in lens)
    padded = sum(len(b) * (max(lens[i][0] for i in b) + max(lens[i][1] for i in b)) for b in batches)
    assert real / padded >= 0.95


def test_token_budget_is_respected():
    lens = lengths()
    batches = bucket_batches(lens, max_tokens=500, generator=torch.Generator().manual_seed(0))
    assert sorted(i for b in batches for i in b) == list(range(len(lens)))
    for b in batches:
        longest = max(max(lens[i]) for i in b)
        assert len(b) == 1 or len(b) * longest <= 500


def test_evaluation_order_is_deterministic_without_generator():
    lens = lengths(500)
    assert bucket_batches(lens, batch_size=32) == bucket_batches(lens, batch_size=32)


def test_pad_right_pads():
    out = pad([[5, 6, 7], [8]])
    assert out.tolist() == [[5, 6, 7], [8, 0, 0]]


def test_lm_chunks_predict_every_token_after_the_first_once():
    stream = list(range(10, 33))  # 23 tokens
    rows = lm_chunks(stream, 5)
    targets = rows[:, 1:].flatten()
    targets = targets[targets >= 0].tolist()
    assert targets == stream[1:]
    inputs = rows[:, :-1].flatten()
    assert inputs[inputs >= 0].tolist()[:len(stream) - 1] == stream[:-1]
