"""Every bad input is one clear EmbinitError line naming the file, line or value."""


import numpy as np
import pytest

from embinit.errors import EmbinitError
from embinit.init import build_table, parse_init_spec, source_dim
from embinit.init import testing as tt
from embinit.vocab import Vocab

VOCAB = Vocab(["<pad>", "the", "cat", "dog"])


def _err(fn, *args, **kw) -> str:
    with pytest.raises(EmbinitError) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.txt"
    msg = _err(build_table, "glove", VOCAB, pretrained=str(missing), cache_dir=False)
    assert "not found" in msg and str(missing) in msg
    assert str(missing) in _err(source_dim, "glove", str(missing))


def test_unreadable_file(tmp_path):
    bad = tmp_path / "g.txt.gz"
    bad.write_bytes(b"this is not gzip data")
    msg = _err(build_table, "glove", VOCAB, pretrained=str(bad), cache_dir=False)
    assert "cannot read" in msg and str(bad) in msg
    folder = tmp_path / "dir.txt"
    folder.mkdir()
    assert "Hugging Face" in _err(build_table, "glove", VOCAB, pretrained=str(folder), cache_dir=False)


def test_empty_file(tmp_path):
    empty = tmp_path / "e.txt"
    empty.write_text("")
    assert "empty" in _err(build_table, "glove", VOCAB, pretrained=str(empty), cache_dir=False)


def test_malformed_value_names_the_line(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("the 0.1 0.2\ncat 0.3 abc\ndog 0.5 0.6\n")
    msg = _err(build_table, "glove", VOCAB, pretrained=str(path), cache_dir=False)
    assert f"{path}:2" in msg and "'abc'" in msg


def test_non_finite_values_are_rejected(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("the 0.1 0.2\ncat nan 0.4\n")
    msg = _err(build_table, "glove", VOCAB, pretrained=str(path), cache_dir=False)
    assert "'cat'" in msg and "non-finite" in msg
    np.save(tmp_path / "m.npy", np.array([[0.1, np.inf]], dtype=np.float32))
    (tmp_path / "m.vocab.txt").write_text("cat\n")
    assert "non-finite" in _err(build_table, "npy", VOCAB, pretrained=str(tmp_path / "m.npy"), cache_dir=False)


def test_non_finite_rows_of_a_hugging_face_source_are_rejected(tmp_path):
    """As the word-vector loaders do: a nan/inf row the vocabulary takes (its own, or its pieces' mean for
    `subword_mean`) is one error naming each token, not a table that trains to NaN (raw) or a
    'zero spread (std=nan)' refusal (standardize)."""
    pytest.importorskip("transformers")
    from safetensors.torch import load_file, save_file
    folder = tt.write_tiny_bert(tmp_path / "bert", dim=8)
    pieces, _ = tt.bert_rows(folder)
    weights = load_file(str(folder / "model.safetensors"))
    key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    weights[key][pieces["cat"], 2] = float("nan")
    weights[key][pieces["##ed"], 0] = float("inf")
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    vocab = Vocab(["the", "cat", "played", "dogs"])
    for spec in ("bert", "bert+standardize"):
        msg = _err(build_table, spec, vocab, pretrained=str(folder), oov="subword_mean", cache_dir=False)
        assert "2 problems" in msg and "non-finite" in msg
        assert "'cat' (source row)" in msg and "'played' (mean of its pieces' rows)" in msg
        assert "'dogs'" not in msg and "'the'" not in msg


@pytest.mark.parametrize("line", ["cat 0.3", "cat 0.3 ", "cat 0.3 0.4 0.5"])
def test_inconsistent_dimension_within_a_file(tmp_path, line):
    path = tmp_path / "g.txt"
    path.write_text(f"the 0.1 0.2\nbird 0.1 0.1\n{line}\ndog 0.5 0.6\n")
    msg = _err(build_table, "glove", VOCAB, pretrained=str(path), cache_dir=False)
    assert f"{path}:3" in msg and "D" in msg


def test_inconsistent_dimension_in_an_unneeded_line_is_still_reported(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("the 0.1 0.2\nbird 0.1\ncat 0.3 0.4\ndog 0.5 0.6\n")
    assert f"{path}:2" in _err(build_table, "glove", VOCAB, pretrained=str(path), cache_dir=False)


def test_header_dimension_disagrees_with_rows(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text("3 4\nthe 0.1 0.2\ncat 0.3 0.4\n")
    assert f"{path}:2" in _err(build_table, "word2vec", VOCAB, pretrained=str(path), cache_dir=False)


def test_dimension_disagrees_with_requested_dim(tmp_path):
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(dim=6))
    msg = _err(build_table, "glove", VOCAB, pretrained=str(path), dim=300, cache_dir=False)
    assert "D=6" in msg and "dim=300" in msg


def test_truncated_word2vec_binary(tmp_path):
    path = tt.write_word2vec_bin(tmp_path / "w.bin", tt.word_vectors(dim=6))
    path.write_bytes(path.read_bytes()[:-20])
    assert "truncated" in _err(build_table, "word2vec", Vocab(["zzz"]), pretrained=str(path), cache_dir=False)


def test_empty_overlap(tmp_path):
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(dim=3))
    msg = _err(build_table, "glove", Vocab(["xyzzy", "plugh"]), pretrained=str(path), cache_dir=False)
    assert "empty overlap" in msg and str(path) in msg


def test_empty_overlap_shows_tokens_it_looked_up(tmp_path):
    """A vocabulary file of sentences (one line each, not one token) finds nothing: the error shows what
    it looked up, so the mistake is seen at once."""
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(dim=3))
    vocab = Vocab(["<pad>", "<unk>", "A man in a red shirt .", "Two dogs play ."], specials=("<pad>", "<unk>"))
    msg = _err(build_table, "glove", vocab, pretrained=str(path), cache_dir=False)
    assert "'A man in a red shirt .', 'Two dogs play .'" in msg and "<pad>" not in msg
    # the case hint names what can change it ("try lowercase lookup" named nothing a spec or `train` sets)
    assert "`embinit embeddings stats --lowercase`" in msg and "`extras: {lowercase: false}`" in msg


def test_npy_without_vocabulary_file_or_mismatched(tmp_path):
    np.save(tmp_path / "m.npy", np.zeros((3, 2), dtype=np.float32))
    assert "m.vocab.txt" in _err(build_table, "npy", VOCAB, pretrained=str(tmp_path / "m.npy"), cache_dir=False)
    (tmp_path / "m.vocab.txt").write_text("the\ncat\n")
    assert "2 tokens" in _err(build_table, "npy", VOCAB, pretrained=str(tmp_path / "m.npy"), cache_dir=False)


@pytest.mark.parametrize("spec,kind,valid", [
    ("glvoe", "init", "glove"),
    ("glove+standardise", "transform", "standardize"),
    ({"source": "glove", "oov": "avg"}, "oov rule", "mean_cov"),
])
def test_unknown_names_list_the_valid_ones(spec, kind, valid):
    msg = _err(parse_init_spec, spec)
    assert f"registered {kind}" in msg and valid in msg


def test_unknown_oov_rule_at_build_time(tmp_path):
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(dim=3))
    msg = _err(build_table, "glove", VOCAB, pretrained=str(path), oov="nearest", cache_dir=False)
    assert "'nearest'" in msg and "subword_mean" in msg


def test_spec_shape_errors():
    assert "unknown init spec keys ['colour']" in _err(parse_init_spec, {"source": "glove", "colour": 1})
    assert "no 'source'" in _err(parse_init_spec, {"oov": "mean"})
    assert "pretrained sources" in _err(parse_init_spec, "xavier+standardize")
    assert "cannot parse" in _err(parse_init_spec, "glove++")
    assert "string or a mapping" in _err(parse_init_spec, 3)


def test_random_init_needs_a_dimension_and_pretrained_needs_a_source():
    assert "dim" in _err(build_table, "xavier", VOCAB)
    assert "--pretrained" in _err(build_table, "glove", VOCAB, cache_dir=False)


def test_subword_mean_needs_a_tokenizer(tmp_path):
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(dim=3))
    msg = _err(build_table, "glove", VOCAB, pretrained=str(path), oov="subword_mean", cache_dir=False)
    assert "subword_mean" in msg and "tokenizer" in msg


@pytest.mark.slow  # imports transformers
def test_hf_model_that_cannot_be_loaded(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert", "hidden_size": 4}')
    msg = _err(build_table, "hf", VOCAB, pretrained=str(folder), cache_dir=False)
    assert "cannot load Hugging Face model" in msg and str(folder) in msg
    assert source_dim("hf", str(folder)) == 4


@pytest.mark.parametrize("line", [b"stra\xdfe 0.3 0.4", b"stra\xdfe mit 0.3 0.4"])   # one word; a spaced word
def test_latin1_word_is_refused_with_its_line(tmp_path, line):
    # a Latin-1 file would otherwise load its ASCII words and leave every umlaut word OOV without a word
    path = tmp_path / "g.txt"
    path.write_bytes(b"the 0.1 0.2\ncaf\xc3\xa9 0.5 0.5\n" + line + b"\ncat 0.5 0.6\n")
    msg = _err(build_table, "glove", Vocab(["<pad>", "the", "straße", "zzz"]), pretrained=str(path),
               cache_dir=False)
    assert f"{path}:3: not UTF-8" in msg and "stra\\xdfe" in msg


def test_latin1_word_in_word2vec_binary_is_refused(tmp_path):
    path = tmp_path / "w.bin"
    row = np.ones(2, dtype="<f4").tobytes()
    path.write_bytes(b"2 2\nthe " + row + b"\nstra\xdfe " + row + b"\n")
    assert "entry 2: not UTF-8" in _err(build_table, "word2vec", Vocab(["zzz"]), pretrained=str(path),
                                        cache_dir=False)


@pytest.mark.parametrize("source", ["bert", "hf"])
def test_a_word_vector_file_given_to_a_subword_init_is_named_a_file(tmp_path, source):
    """`bert` with a GloVe text file was read as a hub id: "cannot load Hugging Face model 'g.txt' (hub id
    (needs the network)): ... the config file ... is not a valid JSON file"."""
    path = tmp_path / "g.txt"
    path.write_text("the 0.1 0.2\n")
    assert _err(source_dim, source, str(path)) == (
        f"{path} is a file; init {source!r} reads a Hugging Face model folder or hub id (a word-vector file is "
        f"read by init 'glove', 'word2vec', 'fasttext' or 'pretrained')")
