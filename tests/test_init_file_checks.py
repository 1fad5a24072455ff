"""A pretrained vector file's problems in one error, a header's N checked against the rows, and words
given more than once made visible (count in the coverage, a warning) rather than accepted silently."""

import numpy as np
import pytest
import torch

from embinit.analysis.sources import load_embeddings
from embinit.errors import MAX_LISTED, EmbinitError
from embinit.init import build_table
from embinit.init import testing as tt
from embinit.stats import embedding_stats
from embinit.vocab import Vocab

# a vocabulary with a word no file below has: every load reads its file to the end
VOCAB = Vocab(["<pad>", "the", "cat", "dog", "zzz"])
ROW = np.ones(2, dtype="<f4").tobytes()


def _err(path, vocab=VOCAB, family="glove") -> str:
    with pytest.raises(EmbinitError) as e:
        build_table(family, vocab, pretrained=str(path), cache_dir=False)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def _binary(path, n, entries):
    path.write_bytes(f"{n} 2\n".encode() + b"".join(w + b" " + ROW + b"\n" for w in entries))
    return path


def test_every_problem_of_a_text_file_is_in_one_error_in_file_order(tmp_path):
    """The reader raised at the first bad line: fixing a file took one run per problem."""
    path = tmp_path / "g.txt"
    path.write_bytes(b"the 0.1 0.2\nbird 0.1\ncat 0.3 abc\nstra\xdfe 0.1 0.2\ndog nan 0.6\n"
                     b"emu 0.1 0.2 0.3\nfox 0.1 0.2\n")
    msg = _err(path)
    assert msg.startswith(f"{path}: 5 problems: ")
    parts = [f"{path}:2: expected a word and 2 values", f"{path}:3: value 'abc' is not a number",
             f"{path}:4: not UTF-8: the word 'stra\\xdfe'", f"{path}:5: the row of 'dog' has a non-finite value",
             f"{path}:6: expected a word and 2 values"]
    assert all(p in msg for p in parts), msg
    assert [msg.index(p) for p in parts] == sorted(msg.index(p) for p in parts)
    assert msg.count("re-encode the file as UTF-8") == 1 and msg.endswith("iconv -f latin1 -t utf-8)")


def test_a_short_row_counts_its_values_in_words(tmp_path):
    """"found 1 values": the count's noun agrees with it, as the file's D's does."""
    path = tmp_path / "g.txt"
    path.write_text("the 0.1 0.2\nbird 0.1\ncat 0.1 0.2 0.3\n")
    msg = _err(path)
    assert f"{path}:2: expected a word and 2 values (the file's D), found 1 value after 'bird'" in msg
    assert f"{path}:3: expected a word and 2 values (the file's D), found 3 values after 'cat'" in msg
    path.write_text("the 0.1\ncat 0.1 0.2 0.3\n")   # D=1
    assert f"{path}:2: expected a word and 1 value (the file's D), found 3 values after 'cat'" in _err(path)


def test_problems_beyond_the_cap_are_counted(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("the 0.1 0.2\n" + "".join(f"w{i} 0.1\n" for i in range(MAX_LISTED + 5)))
    msg = _err(path)
    assert f"{MAX_LISTED + 5} problems" in msg and "(and 5 more)" in msg
    assert f"{path}:{MAX_LISTED + 1}:" in msg and f"{path}:{MAX_LISTED + 2}:" not in msg


@pytest.mark.parametrize("n, rows, truncated", [(5, 3, True), (2, 3, False)])
def test_a_text_header_whose_n_is_not_the_number_of_rows(tmp_path, n, rows, truncated):
    """A truncated word2vec/fastText download loaded its first rows and left the rest to the OOV rule."""
    path = tmp_path / "w.vec"
    path.write_text(f"{n} 2\nthe 0.1 0.2\n\ncat 0.3 0.4\ndog 0.5 0.6\n")   # a blank line is no row
    msg = _err(path, family="fasttext")
    assert f"{path}:1: the header says {n} rows but the file has {rows}" in msg
    assert ("truncated download" in msg) == truncated


def test_the_row_count_includes_the_rows_with_problems(tmp_path):
    path = tmp_path / "w.vec"
    path.write_text("4 2\nthe 0.1 0.2\ncat 0.3\ndog 0.5 0.6\n")
    msg = _err(path, family="fasttext")
    assert msg.startswith(f"{path}: 2 problems: {path}:1: the header says 4 rows but the file has 3 ")
    assert f"{path}:3: expected a word and 2 values" in msg


@pytest.mark.parametrize("n, entries, expected", [
    (4, [b"the", b"cat"], "truncated: the header says 4 entries but the file has 2 (a truncated download?"),
    (2, [b"the", b"cat", b"dog"], "the header says 2 entries but the file has 3"),
])
def test_a_binary_header_whose_n_is_not_the_number_of_entries(tmp_path, n, entries, expected):
    """A binary file that ends on an entry boundary before N was accepted when every vocabulary word came
    before the end (reading stopped there); entries past N were never read."""
    path = _binary(tmp_path / "w.bin", n, entries)
    assert f"{path}: {expected}" in _err(path, Vocab(["the", "cat"]), family="word2vec")


def test_a_binary_file_cut_inside_an_entry(tmp_path):
    path = _binary(tmp_path / "w.bin", 3, [b"the", b"cat", b"dog"])
    path.write_bytes(path.read_bytes()[:-5])
    msg = _err(path, family="word2vec")
    assert "truncated: the header says 3 entries but the file has 2 and 8 bytes of an incomplete one" in msg


def test_every_problem_of_a_binary_file_is_in_one_error(tmp_path):
    path = _binary(tmp_path / "w.bin", 4, [b"the", b"stra\xdfe", b"caf\xe9"])
    msg = _err(path, family="word2vec")
    assert msg.startswith(f"{path}: 3 problems: {path}: truncated: the header says 4 entries but the file has 3")
    assert f"{path}:entry 2: not UTF-8" in msg and f"{path}:entry 3: not UTF-8" in msg


@pytest.mark.parametrize("fmt", ["glove", "word2vec", "word2vec_bin", "npy"])
def test_a_repeated_word_keeps_its_first_row_and_is_counted_and_named(tmp_path, fmt):
    """A word given twice silently took its first row; now the coverage counts such words and a warning
    names them and where they are."""
    rows = [("the", [1.0, 2.0]), ("cat", [3.0, 4.0]), ("the", [5.0, 6.0]), ("emu", [0.0, 0.0]),
            ("emu", [0.0, 1.0]), ("the", [7.0, 8.0])]   # 'emu' is not in the vocabulary: not counted
    if fmt == "word2vec_bin":
        path = tmp_path / "w.bin"
        path.write_bytes(b"6 2\n" + b"".join(w.encode() + b" " + np.asarray(v, "<f4").tobytes() for w, v in rows))
    elif fmt == "npy":
        path = tmp_path / "m.npy"
        np.save(path, np.asarray([v for _, v in rows], dtype=np.float32))
        (tmp_path / "m.vocab.txt").write_text("".join(w + "\n" for w, _ in rows))
    else:
        path = tmp_path / "w.txt"
        path.write_text(("6 2\n" if fmt == "word2vec" else "") + "".join(f"{w} {v[0]} {v[1]}\n" for w, v in rows))
    family = {"glove": "glove", "word2vec": "word2vec", "word2vec_bin": "word2vec", "npy": "npy"}[fmt]
    with pytest.warns(RuntimeWarning) as caught:
        res = build_table(family, VOCAB, pretrained=str(path), cache_dir=False)
    assert res.table[1].tolist() == [1.0, 2.0] and res.coverage["duplicate_words"] == 1
    where = {"glove": "lines 1, 3, 6", "word2vec": "lines 2, 4, 7", "word2vec_bin": "entries 1, 3, 6",
             "npy": "m.vocab.txt lines 1, 3, 6"}[fmt]
    message = str(caught[0].message)
    assert f"{path}: 1 word(s) the vocabulary takes occur more than once" in message, message
    assert f"first row: 'the' ({where})" in message and "emu" not in message


def test_a_repeated_word_whose_row_the_table_does_not_take_is_not_counted(tmp_path, recwarn):
    path = tmp_path / "g.txt"
    path.write_text("Paris 1 1\nparis 2 2\nparis 3 3\n")
    res = build_table({"source": "glove", "lowercase": True}, Vocab(["Paris", "x"]), pretrained=str(path),
                      cache_dir=False)
    assert res.table[0].tolist() == [1.0, 1.0] and res.coverage["duplicate_words"] == 0
    assert not [w for w in recwarn if "more than once" in str(w.message)]


def test_the_count_and_the_warning_survive_the_cache(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("the 1 1\nthe 2 2\ncat 3 3\n")
    for cached in (False, True):
        with pytest.warns(RuntimeWarning, match="'the' \\(lines 1, 2\\)"):
            res = build_table("glove", VOCAB, pretrained=str(path), cache_dir=tmp_path / "cache")
        assert res.info["cached"] is cached and res.coverage["duplicate_words"] == 1


def test_the_count_reaches_the_embedding_statistics():
    cov = {"rows_found": 3, "rows_total": 4, "row_share": 0.75, "duplicate_words": 2}
    assert embedding_stats(torch.ones(4, 2), coverage=cov)["emb/coverage_duplicate_words"] == 2.0


def test_many_occurrences_are_summed_up(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("the 1 1\n" * 5 + "cat 1 1\n")
    with pytest.warns(RuntimeWarning, match="'the' \\(lines 1, 2, 3, ... \\(5 times\\)\\)"):
        build_table("glove", VOCAB, pretrained=str(path), cache_dir=False)


def test_an_analysis_reads_the_whole_file_but_top_reads_a_prefix(tmp_path):
    """The analyses' `--top` keeps its early stop (a prefix by request); a whole read is checked."""
    path = tmp_path / "w.vec"
    path.write_text("9 2\nthe 0.1 0.2\ncat 0.3 0.4\ndog 0.5 0.6\n")
    assert load_embeddings(path, top=2).tokens == ["the", "cat"]
    with pytest.raises(EmbinitError, match="the header says 9 rows but the file has 3"):
        load_embeddings(path)
    path.write_text("the 0.1 0.2\ncat 0.3 0.4\nthe 0.5 0.6\n")
    with pytest.warns(RuntimeWarning, match="'the' \\(lines 1, 3\\)"):
        emb = load_embeddings(path)
    assert emb.tokens == ["the", "cat"] and emb.matrix[0].tolist() == pytest.approx([0.1, 0.2])


def test_a_good_file_loads_without_a_warning(tmp_path, recwarn):
    for path in (tt.write_text(tmp_path / "w.vec", tt.word_vectors(dim=3), header=True),
                 tt.write_word2vec_bin(tmp_path / "w.bin", tt.word_vectors(dim=3))):
        res = build_table("word2vec", VOCAB, pretrained=str(path), cache_dir=False)
        assert res.coverage["duplicate_words"] == 0 and res.coverage["rows_found"] == 3
    assert not recwarn.list


def test_a_byte_order_mark_is_refused_not_read_into_the_first_word(tmp_path):
    """A GloVe file saved with a BOM read its first word as '\\ufeffthe': that row was never found, and
    the vocabulary's most frequent word got an OOV row, silently (coverage one row short)."""
    path = tmp_path / "g.txt"
    path.write_bytes(b"\xef\xbb\xbfthe 0.1 0.2\ncat 0.3 0.4\n")
    msg = _err(path)
    assert msg == (f"{path}:1: the file starts with a UTF-8 byte-order mark (bytes EF BB BF), which would be read "
                   f"as part of its first word; remove it (e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' {path})")
