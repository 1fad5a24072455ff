"""The analyses read word-vector files with embinit.init's readers (style review, finding 3): the words and
rows an analysis loads from a file are those an init built from the same file gets, and the errors are
the init readers' (file and line). A source of 0 rows is an error, not an empty table."""

import json

import numpy as np
import pytest
import torch

from embinit.analysis.sources import load_embeddings
from embinit.cli import main
from embinit.errors import EmbinitError
from embinit.init import build_table
from embinit.vocab import Vocab
from helpers.analogy import QUESTIONS, VECS

torch.set_num_threads(1)


def _write(path, vecs, sep):
    path.write_text("".join(sep.join([w, *(str(float(v)) for v in vec)]) + "\n" for w, vec in vecs.items()))
    return path


def _analogy_rows(capsys, vectors, questions):
    assert main(["analogy", "--embeddings", str(vectors), "--questions", str(questions), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["rows"]


def test_a_tab_separated_file_gives_the_analysis_the_table_init_reads(tmp_path, capsys):
    """The analysis reader used to find no word in a tab-separated file (its own word split) and analyse
    a 0-row table without a word; init's loader read every row."""
    tabs, spaces = _write(tmp_path / "tabs.txt", VECS, "\t"), _write(tmp_path / "spaces.txt", VECS, " ")
    emb = load_embeddings(tabs)
    assert emb.tokens == list(VECS)
    init = build_table("glove", Vocab(list(VECS)), pretrained=str(tabs), cache_dir=False)
    assert init.coverage["rows_found"] == len(VECS)
    assert torch.equal(emb.matrix, init.table) and torch.equal(emb.matrix, load_embeddings(spaces).matrix)
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTIONS)
    via_tabs = _analogy_rows(capsys, tabs, questions)
    assert via_tabs == _analogy_rows(capsys, spaces, questions) and via_tabs[0]["total"] == 6


@pytest.mark.parametrize("name", ["w.bin", "w.bin.gz"])
def test_a_word2vec_binary_file_is_analysed_without_a_token_list(tmp_path, capsys, name):
    """A binary file was refused with "need a token list; pass --vocab" (which `embinit similarity` does
    not have); its words are now read in file order, as a text file's, the rows the init reads."""
    from embinit.init import testing as tt
    vecs = {w: np.asarray(v, dtype=np.float32) for w, v in VECS.items()}
    binary = tt.write_word2vec_bin(tmp_path / name, vecs)
    emb = load_embeddings(binary)
    assert emb.tokens == list(VECS)
    assert torch.equal(emb.matrix, torch.tensor(np.stack(list(vecs.values()))))
    assert load_embeddings(binary, top=2).tokens == list(VECS)[:2]
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTIONS)
    assert _analogy_rows(capsys, binary, questions) == _analogy_rows(capsys, _write(tmp_path / "t.txt", VECS, " "),
                                                                    questions)


def test_an_npy_vocabulary_is_split_on_newlines_only(tmp_path):
    """A token may hold \\x85 or \\u2028 (str.splitlines() splits on them, init's reader does not): the
    analysis names every row as init does, and finds the same rows for the same tokens."""
    tokens = ["caf\u00e9\u2028bar", "a\x85b", "x\x0by", "plain", "last"]
    matrix = np.arange(10, dtype=np.float32).reshape(5, 2)
    np.save(tmp_path / "m.npy", matrix)
    (tmp_path / "m.vocab.txt").write_text("\r\n".join(tokens) + "\r\n", encoding="utf-8")
    emb = load_embeddings(tmp_path / "m.npy")
    assert emb.tokens == tokens and emb.matrix.tolist() == matrix.tolist()
    init = build_table("npy", Vocab(tokens), pretrained=str(tmp_path / "m.npy"), cache_dir=False)
    assert init.coverage["rows_found"] == 5 and torch.equal(init.table, emb.matrix)
    first2 = load_embeddings(tmp_path / "m.npy", top=2)
    assert first2.tokens == tokens[:2] and first2.matrix.tolist() == matrix[:2].tolist()


def _not_utf8_npy(tmp_path):
    np.save(tmp_path / "m.npy", np.zeros((3, 2), dtype=np.float32))
    vocab = tmp_path / "m.vocab.txt"
    vocab.write_bytes("the\nstra\u00dfe\ncat\n".encode("latin-1"))
    return tmp_path / "m.npy", f"{vocab}:2: not UTF-8: the word 'stra\\xdfe' has byte 0xdf"


def _long_npy_vocab(tmp_path):
    np.save(tmp_path / "m.npy", np.zeros((2, 2), dtype=np.float32))
    (tmp_path / "m.vocab.txt").write_text("the\ncat\nsat\n")
    return tmp_path / "m.npy", f"{tmp_path / 'm.vocab.txt'} has 3 tokens but {tmp_path / 'm.npy'} has 2 rows"


def _not_utf8_lines_and_too_long_npy_vocab(tmp_path):
    np.save(tmp_path / "m.npy", np.zeros((2, 2), dtype=np.float32))
    vocab = tmp_path / "m.vocab.txt"
    vocab.write_bytes("stra\u00dfe\nthe\ncaf\u00e9\n".encode("latin-1"))
    return tmp_path / "m.npy", (f"{vocab}: 3 problems: {vocab}:1: not UTF-8: the word 'stra\\xdfe' has byte 0xdf "
                                f"at position 4 | {vocab}:3: not UTF-8: the word 'caf\\xe9' has byte 0xe9 at "
                                f"position 3 | {vocab} has 3 tokens but {tmp_path / 'm.npy'} has 2 rows; re-encode")


@pytest.mark.parametrize("make", [_not_utf8_npy, _long_npy_vocab, _not_utf8_lines_and_too_long_npy_vocab])
def test_a_bad_npy_vocabulary_is_the_same_error_for_the_analysis_and_for_init(tmp_path, make):
    """The analysis reader let a raw UnicodeDecodeError through (no file, no line) and took a vocabulary
    longer than the matrix without a word; now both readers are init's."""
    path, message = make(tmp_path)
    with pytest.raises(EmbinitError) as analysis:
        load_embeddings(path)
    assert message in str(analysis.value)
    with pytest.raises(EmbinitError) as built:
        build_table("npy", Vocab(["the", "cat"]), pretrained=str(path), cache_dir=False)
    assert str(built.value) == str(analysis.value)


def _header_only(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("0 3\n\n")
    return path


def _zero_row_npy(tmp_path):
    np.save(tmp_path / "m.npy", np.zeros((0, 3), dtype=np.float32))
    (tmp_path / "m.vocab.txt").write_text("")
    return tmp_path / "m.npy"


@pytest.mark.parametrize("make", [_header_only, _zero_row_npy])
def test_a_source_of_0_rows_is_an_error_naming_it(tmp_path, capsys, make):
    path = make(tmp_path)
    with pytest.raises(EmbinitError, match="no rows to analyse") as e:
        load_embeddings(path)
    assert str(path) in str(e.value)
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTIONS)
    assert main(["analogy", "--embeddings", str(path), "--questions", str(questions)]) == 2
    assert f"{path}: no rows to analyse" in capsys.readouterr().err
