"""Basics of the shared foundation: Vocab, sinusoidal position encodings, TrialConfig."""

import math
from collections import Counter

import pytest
import torch

from embinit.config import TrialConfig, task_defaults
from embinit.errors import EmbinitError
from embinit.posenc import sinusoidal
from embinit.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab


def test_build_puts_specials_first_then_by_count_then_alphabetically():
    counter = Counter({"b": 3, "a": 3, "c": 5, "rare": 1})
    v = Vocab.build(counter, min_freq=2)
    assert v.tokens == [PAD, UNK, BOS, EOS, "c", "a", "b"]
    assert [v.index(s) for s in SPECIALS] == [0, 1, 2, 3]
    assert v.counts == {"c": 5, "a": 3, "b": 3}
    assert Vocab.build(counter, min_freq=1, max_size=6).tokens == [PAD, UNK, BOS, EOS, "c", "a"]


def test_encode_decode_and_unknowns():
    v = Vocab.build(Counter({"cat": 2, "dog": 2}))
    ids = v.encode(["cat", "zebra", "dog"])
    assert ids == [v.index("cat"), v.index(UNK), v.index("dog")]
    assert v.decode(ids) == ["cat", UNK, "dog"]
    assert v.index("zebra") == 1 and "cat" in v and "zebra" not in v and v[4] in ("cat", "dog")
    with pytest.raises(KeyError):
        Vocab(["a", "b"]).index("zebra")


def test_duplicates_are_rejected():
    with pytest.raises(EmbinitError, match="duplicate"):
        Vocab(["a", "b", "a"])


def test_an_empty_token_in_a_vocab_file_is_refused_with_its_lines(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("the\t5\n\t67349\ncat\t3\n \t2\n")   # a naive `cut | uniq -c` leaves "\t67349"
    with pytest.raises(EmbinitError, match=r"v.txt: empty token \(nothing before the tab\) on lines 2, 4;"):
        Vocab.load(path)


def test_fingerprint_depends_on_tokens_and_order():
    a, b = Vocab(["x", "y"]), Vocab(["y", "x"])
    assert a.fingerprint() == Vocab(["x", "y"]).fingerprint() != b.fingerprint()
    assert Vocab(["xy"]).fingerprint() != Vocab(["x", "y"]).fingerprint()


def test_save_load_round_trip_with_counts(tmp_path):
    v = Vocab.build(Counter({"naïve": 4, "tab-free": 2}), min_freq=1)
    v.save(tmp_path / "v.txt")
    w = Vocab.load(tmp_path / "v.txt")
    assert w.tokens == v.tokens and w.counts == v.counts and w.specials == SPECIALS
    assert w.fingerprint() == v.fingerprint()


@pytest.mark.parametrize("content,match", [(None, "not found"), ("", "empty"), ("a\t3\nb\tx\n", ":2")])
def test_load_errors(tmp_path, content, match):
    path = tmp_path / "v.txt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(EmbinitError, match=match):
        Vocab.load(path)


def test_a_folder_given_as_the_vocabulary_file_is_named_a_folder(tmp_path):
    with pytest.raises(EmbinitError, match="is a folder; give the file in it"):
        Vocab.load(tmp_path)


def test_a_vocab_file_that_is_not_utf8_names_its_lines_and_the_fix(tmp_path):
    """A Latin-1 vocab.txt gave Python's codec message ("'utf-8' codec can't decode byte 0xe9 in position
    13: invalid continuation byte"): no line, no fix."""
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"<pad>\nthe\ncaf\xe9\nna\xefve\n")
    with pytest.raises(EmbinitError) as e:
        Vocab.load(path)
    msg = str(e.value)
    assert f"{path}:3: not UTF-8: byte 0xe9 at column 4" in msg and f"{path}:4: not UTF-8: byte 0xef" in msg
    assert msg.endswith("re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)") and "codec" not in msg


def test_a_token_holding_a_unicode_line_separator_round_trips(tmp_path):
    """`load` split lines as str.splitlines does (on U+2028, U+0085, ...), not on "\\n" as `save` writes."""
    v = Vocab(["a\u2028b", "c\x85d", "e"])
    v.save(tmp_path / "v.txt")
    assert Vocab.load(tmp_path / "v.txt").tokens == v.tokens


def test_example_vocab_file_is_a_real_vocabulary():
    from pathlib import Path
    v = Vocab.load(Path(__file__).parent / "data" / "example_vocab.txt")
    assert v.tokens[:4] == list(SPECIALS) and 150 <= len(v) <= 250
    assert {"the", "a", "man", "dog"} <= set(v.tokens)
    assert all(v.counts[t] > 0 for t in v.tokens[4:])


def test_sinusoidal_matches_the_formula():
    pe = sinusoidal(20, 7, base=10000.0)
    assert pe.shape == (20, 7) and pe.dtype == torch.float32
    for pos in (0, 1, 5, 19):
        for i in range(7):
            angle = pos / 10000.0 ** ((i - i % 2) / 7)
            expect = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert pe[pos, i].item() == pytest.approx(expect, abs=1e-6)
    assert torch.equal(sinusoidal(3, 4, dtype=torch.float64)[0], torch.tensor([0.0, 1.0, 0.0, 1.0],
                                                                                dtype=torch.float64))
    with pytest.raises(ValueError):
        sinusoidal(0, 4)


def test_trial_key_is_stable_and_ignores_threads_and_device():
    a = TrialConfig(task="multi30k", init="glove+standardize", seed=1)
    assert a.key() == TrialConfig(task="multi30k", init="glove+standardize", seed=1, threads=4,
                                  device="cpu").key()
    assert a.key() != TrialConfig(task="multi30k", init="glove+standardize", seed=2).key()
    # an explicit default is the same trial as an implicit one
    assert a.key() == TrialConfig(task="multi30k", init="glove+standardize", seed=1,
                                  lr=task_defaults("multi30k").lr).key()
    assert TrialConfig.from_dict(a.to_dict()) == a


def test_trial_config_resolution_and_errors():
    r = TrialConfig(task="sst2").resolved()
    assert r.epochs == task_defaults("sst2").epochs and r.lr == task_defaults("sst2").lr and r.d_model is None
    with pytest.raises(EmbinitError, match="unknown trial config fields"):
        TrialConfig.from_dict({"task": "sst2", "learning_rate": 1})
    with pytest.raises(EmbinitError, match="not a registered task"):
        task_defaults("mnist")


def test_a_byte_order_mark_is_no_part_of_the_first_token(tmp_path):
    """A vocabulary saved with a BOM (a Windows editor) had '\\ufeffthe' for its first token: the pretrained
    row of 'the' was never found, and the questions' first section header was read as a bad line."""
    from embinit.analysis.analogy import load_questions
    from helpers.analogy import QUESTIONS
    (tmp_path / "v.txt").write_bytes(b"\xef\xbb\xbfthe\t5\nof\t3\n")
    v = Vocab.load(tmp_path / "v.txt")
    assert "the" in v.tokens and v.counts["the"] == 5 and not any("\ufeff" in t for t in v.tokens)
    (tmp_path / "q.txt").write_bytes(b"\xef\xbb\xbf" + QUESTIONS.encode())
    with_mark, without = load_questions(tmp_path / "q.txt"), load_questions(_plain(tmp_path, QUESTIONS))
    assert (with_mark.sections, with_mark.count, with_mark.invalid) == (without.sections, without.count,
                                                                         without.invalid)


def _plain(tmp_path, text):
    (tmp_path / "plain.txt").write_text(text)
    return tmp_path / "plain.txt"
