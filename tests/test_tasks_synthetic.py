"""Synthetic tasks: deterministic per seed, real words, and the structure a small model has to learn."""

import pytest

from embinit.tasks import load_task, synthetic

TASKS = ("synthetic_translation", "synthetic_classification", "synthetic_lm")


def load(task, seed, **kw):
    return load_task(task, tokenizer="whitespace", min_freq=1, seed=seed, cache_dir=False, **kw)


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_same_data_other_seed_other_data(task):
    a, b, c = load(task, 3), load(task, 3), load(task, 4)
    assert a.splits == b.splits and a.vocab.tokens == b.vocab.tokens
    assert a.splits["train"] != c.splits["train"]
    assert a.info["seed"] == 3 and a.info["loaded_from"] == "generated(seed=3)"


def test_translation_is_word_for_word():
    raw = synthetic.translation(seed=0)
    assert [len(raw.splits[s]) for s in ("train", "val", "test")] == [2000, 200, 200]
    for src, tgt in raw.splits["train"][:200]:
        assert tgt.split() == [synthetic.LEXICON[w] for w in src.split()]
    data = load("synthetic_translation", 0)
    assert data.eval_splits == ["val", "test"] and len(data.references["test"]) == 200
    assert all(len(s) == len(t) for s, t in data.splits["train"])
    assert set(data.vocab.tokens[4:]) <= set(synthetic.LEXICON.values())   # real English words


def test_classification_label_follows_the_keyword():
    data = load("synthetic_classification", 0)
    assert data.num_labels == 2 and data.eval_splits == ["dev"]
    pos = {data.vocab.index(w) for w in synthetic.POSITIVE}
    neg = {data.vocab.index(w) for w in synthetic.NEGATIVE}
    labels = []
    for ids, label in data.splits["train"]:
        assert label == (1 if pos & set(ids) else 0) and bool(pos & set(ids)) != bool(neg & set(ids))
        labels.append(label)
    assert 0.4 < sum(labels) / len(labels) < 0.6


def test_lm_stream_is_predictable():
    data = load("synthetic_lm", 0)
    stream = data.splits["train"]
    # Most tokens are determined by the previous two (fixed sentences cycling): count the contexts.
    following = {}
    for a, b, c in zip(stream, stream[1:], stream[2:]):
        following.setdefault((a, b), set()).add(c)
    determined = sum(len(v) == 1 for v in following.values()) / len(following)
    assert determined > 0.6 and len(data.vocab) < 60
    assert data.eval_splits == ["valid", "test"]
