"""The FOCUS-style OOV rule (issue 23, item 7): sparsemax weights, rows mixed from the found rows by
auxiliary-vector similarity, the fallback for tokens without one, seeding, the on-disk cache, errors,
and the trainer's training text per task kind."""

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from embinit.errors import EmbinitError
from embinit.init import build_table
from embinit.init import focus
from embinit.init import testing as tt
from embinit.train.prepare import training_text
from embinit.vocab import Vocab

torch.set_num_threads(1)
VOCAB = Vocab(["<pad>", "<unk>", "the", "cat", "sat", "zebra", "mat", "on", "dog", "a"])
CORPUS = [["the", "cat", "sat", "on", "a", "mat"], ["a", "zebra", "sat", "on", "the", "dog"]] * 4


@pytest.fixture(scope="module")
def glove(tmp_path_factory):
    words = ["the", "cat", "sat", "mat", "on", "dog", "a"]     # no "zebra"
    return str(tt.write_text(tmp_path_factory.mktemp("g") / "g.txt", tt.word_vectors(words, dim=6, seed=2)))


def test_sparsemax_is_the_simplex_projection():
    w = focus.sparsemax(torch.tensor([[1.0, 0.5, -1.0], [0.2, 0.2, 0.2], [3.0, 0.0, 0.0]], dtype=torch.float64))
    assert torch.allclose(w, torch.tensor([[0.75, 0.25, 0.0], [1 / 3, 1 / 3, 1 / 3], [1.0, 0.0, 0.0]],
                                          dtype=torch.float64))
    z = torch.randn(50, 200, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w = focus.sparsemax(z)
    assert (w >= 0).all() and torch.allclose(w.sum(1), torch.ones(50, dtype=torch.float64))
    assert ((w > 0).sum(1) < 200).all()


def test_rows_are_the_sparsemax_mix_of_the_found_rows():
    aux_found = torch.eye(4, dtype=torch.float64)
    found_rows = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    aux_missing = torch.tensor([[0.0, 0.0, 2.0, 0.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    rows = focus.mix_rows(aux_missing, aux_found, found_rows)
    assert torch.allclose(rows[0], found_rows[2])                         # the one similar word
    assert torch.allclose(rows[1], (found_rows[0] + found_rows[1]) / 2)   # two equally similar words


class FakeVectors:
    """A gensim KeyedVectors stand-in: one-hot auxiliary vectors, except that `zebra` has exactly
    `dog`'s."""

    def __init__(self, sentences):
        words = sorted({w for s in sentences for w in s})
        self.key_to_index = {w: i for i, w in enumerate(words)}
        self.vector_size = len(words)
        self.table = {w: np.eye(len(words), dtype=np.float32)[i] for i, w in enumerate(words)}
        self.table["zebra"] = self.table["dog"]

    def __getitem__(self, word):
        return self.table[word]


def test_zebra_gets_dogs_row_and_specials_the_fallback(glove, tmp_path, monkeypatch):
    monkeypatch.setattr(focus, "_train_fasttext", lambda sentences, seed: FakeVectors(sentences))
    res = build_table("glove+standardize", VOCAB, pretrained=glove, oov="focus", corpus=CORPUS,
                      cache_dir=tmp_path, seed=0)
    t = res.table
    assert torch.allclose(t[VOCAB.index("zebra")], t[VOCAB.index("dog")], atol=1e-6)
    found = t[2:].double()
    for special in (0, 1):   # absent from the text: N(mean, std) of the found rows, per dimension
        assert not torch.allclose(t[special].double(), found.mean(0), atol=1e-3)
    other = build_table("glove+standardize", VOCAB, pretrained=glove, oov="focus", corpus=CORPUS,
                        cache_dir=tmp_path, seed=1).table
    assert torch.equal(other[VOCAB.index("zebra")], t[VOCAB.index("zebra")]) and not torch.equal(other[:2], t[:2])


def test_ids_and_tokens_give_the_same_table(glove, tmp_path):
    ids = [[VOCAB.index(w) for w in s] for s in CORPUS]
    a = build_table("glove", VOCAB, pretrained=glove, oov="focus", corpus=CORPUS, cache_dir=tmp_path, seed=4)
    b = build_table("glove", VOCAB, pretrained=glove, oov="focus", corpus=ids, cache_dir=tmp_path, seed=4)
    assert torch.equal(a.table, b.table)


def test_auxiliary_vectors_are_cached_on_disk(glove, tmp_path, monkeypatch):
    a = build_table("glove", VOCAB, pretrained=glove, oov="focus", corpus=CORPUS, cache_dir=tmp_path, seed=2)
    assert len(list((tmp_path / "focus").glob("*.npz"))) == 1

    def no_training(*args):
        raise AssertionError("trained again despite the cache")

    monkeypatch.setattr(focus, "_train_fasttext", no_training)
    b = build_table("glove", VOCAB, pretrained=glove, oov="focus", corpus=CORPUS, cache_dir=tmp_path, seed=2)
    assert torch.equal(a.table, b.table)
    with pytest.raises(AssertionError, match="trained again"):   # another text is another entry
        build_table("glove", VOCAB, pretrained=glove, oov="focus", corpus=CORPUS[:3], cache_dir=tmp_path, seed=2)


def test_without_training_text_the_error_says_what_is_needed(glove):
    with pytest.raises(EmbinitError, match="needs the task's training text"):
        build_table("glove", VOCAB, pretrained=glove, oov="focus", cache_dir=False)


@pytest.mark.slow  # two interpreters importing gensim
def test_same_seed_same_rows_in_another_process_with_another_hash_seed(glove, tmp_path):
    code = ("import sys, torch; from embinit.init import build_table; from embinit.vocab import Vocab; "
            f"v = Vocab({VOCAB.tokens!r}); c = {CORPUS!r}; "
            f"t = build_table('glove', v, pretrained={glove!r}, oov='focus', corpus=c, cache_dir=False, seed=3)"
            ".table; print(t[5].tolist())")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": h}).stdout for h in ("1", "2")]
    assert outs[0] == outs[1] and outs[0].startswith("[")


def test_training_text_per_task_kind():
    vocab = Vocab(["<pad>", "<unk>", "<bos>", "<eos>", "x", "y"])
    tr = SimpleNamespace(kind="translation", vocab=vocab, splits={"train": [([4], [5, 5]), ([5], [4])]})
    assert training_text(tr, "src") == [[4], [5]] and training_text(tr, "tgt") == [[5, 5], [4]]
    cl = SimpleNamespace(kind="classification", vocab=vocab, splits={"train": [([4, 5], [5], 1), ([4], [4], 0)]})
    assert training_text(cl, "tok") == [[4, 5], [5], [4], [4]]
    lm = SimpleNamespace(kind="lm", vocab=vocab, splits={"train": [4, 5, 3, 5, 3, 4]})
    assert training_text(lm, "tok") == [[4, 5], [5], [4]]


def test_blocks_give_the_unblocked_mix():
    g = torch.Generator().manual_seed(3)
    aux_m, aux_f = torch.randn(2 * focus.CHUNK + 5, 8, generator=g), torch.randn(40, 8, generator=g)
    rows = torch.randn(40, 5, generator=g, dtype=torch.float64)
    unit = lambda x: x.double() / x.double().norm(dim=1, keepdim=True)   # noqa: E731
    assert torch.allclose(focus.mix_rows(aux_m, aux_f, rows), focus.sparsemax(unit(aux_m) @ unit(aux_f).T) @ rows)
