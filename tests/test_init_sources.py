"""Every pretrained source format round-trips exact rows; lookups, specials, cache and source_dim."""

import os

import numpy as np
import pytest
import torch

from embinit.init import build_table, load_aligned, source_dim
from embinit.init import testing as tt
from embinit.vocab import Vocab

torch.set_num_threads(1)
VOCAB = Vocab(["<pad>", "<unk>", "the", "cat", "sat", "zebra", "mat", "Paris"])


def _write(fmt, tmp_path, vectors):
    return {
        "glove": lambda: tt.write_text(tmp_path / "g.txt", vectors),
        "glove_gz": lambda: tt.write_text(tmp_path / "g.txt.gz", vectors),
        "word2vec": lambda: tt.write_text(tmp_path / "w.txt", vectors, header=True),
        "fasttext": lambda: tt.write_text(tmp_path / "f.vec", vectors, header=True),
        "word2vec_bin": lambda: tt.write_word2vec_bin(tmp_path / "w.bin", vectors),
        "npy": lambda: tt.write_npy(tmp_path / "m.npy", vectors),
        # the format is told by the content, not the name: GoogleNews' binary is .bin.gz, and word2vec
        # text saved as .bin was read as binary (rows of ~1e25 built without an error)
        "word2vec_bin_gz": lambda: tt.write_word2vec_bin(tmp_path / "w.bin.gz", vectors),
        "word2vec_text_named_bin": lambda: tt.write_text(tmp_path / "w.bin", vectors, header=True),
        "word2vec_bin_named_txt": lambda: tt.write_word2vec_bin(tmp_path / "w.txt", vectors),
    }[fmt]()


FAMILY = {"glove": "glove", "glove_gz": "glove", "word2vec": "word2vec", "fasttext": "fasttext",
          "word2vec_bin": "word2vec", "npy": "npy", "word2vec_bin_gz": "word2vec",
          "word2vec_text_named_bin": "word2vec", "word2vec_bin_named_txt": "word2vec"}


@pytest.mark.parametrize("fmt", list(FAMILY))
def test_word_vector_formats_round_trip_exact_rows(fmt, tmp_path):
    vectors = tt.word_vectors(dim=6, seed=3)
    path = _write(fmt, tmp_path, vectors)
    res = build_table(FAMILY[fmt], VOCAB, pretrained=str(path), cache_dir=False, seed=0)
    assert res.table.shape == (len(VOCAB), 6) and res.dim == 6
    for i, tok in enumerate(VOCAB.tokens):
        if tok in vectors:
            assert torch.equal(res.table[i], torch.tensor(vectors[tok], dtype=torch.float32)), tok
    assert res.coverage["rows_found"] == sum(t in vectors for t in VOCAB.tokens) == 5
    assert source_dim(FAMILY[fmt], str(path)) == 6
    assert source_dim("pretrained", str(path)) == 6


@pytest.mark.parametrize("fmt", list(FAMILY))
def test_generic_pretrained_alias_detects_the_format(fmt, tmp_path):
    vectors = tt.word_vectors(dim=4, seed=1)
    path = _write(fmt, tmp_path, vectors)
    a = build_table("pretrained", VOCAB, pretrained=str(path), cache_dir=False).table
    b = build_table(FAMILY[fmt], VOCAB, pretrained=str(path), cache_dir=False).table
    assert torch.equal(a, b)


def test_lowercase_fallback_prefers_the_exact_token(tmp_path):
    vectors = tt.word_vectors(["the", "cat", "paris", "Paris", "london"], dim=3)
    path = tt.write_text(tmp_path / "g.txt", vectors)
    vocab = Vocab(["The", "Paris", "London", "cat"])
    plain = build_table("glove", vocab, pretrained=str(path), cache_dir=False)
    assert plain.coverage["rows_found"] == 2
    low = build_table({"source": "glove", "lowercase": True}, vocab, pretrained=str(path), cache_dir=False)
    assert low.coverage["rows_found"] == 4
    assert torch.equal(low.table[1], torch.tensor(vectors["Paris"], dtype=torch.float32))
    assert torch.equal(low.table[2], torch.tensor(vectors["london"], dtype=torch.float32))


def test_first_occurrence_wins_and_words_may_contain_spaces(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("cat 1.0 2.0\n. . . 5.0 6.0\ncat 3.0 4.0\n. 7.0 8.0\n", encoding="utf-8")
    with pytest.warns(RuntimeWarning, match="'cat' \\(lines 1, 3\\)"):
        res = build_table("glove", Vocab(["cat", ". . .", "."]), pretrained=str(path), cache_dir=False)
    assert res.table.tolist() == [[1.0, 2.0], [5.0, 6.0], [7.0, 8.0]]


def test_trailing_spaces_crlf_and_a_last_line_without_newline(tmp_path):
    path = tmp_path / "g.txt"
    path.write_bytes(b"the 0.1 0.2 \ndog 0.5 0.6\r\n\nlast 1 2")
    res = build_table("glove", Vocab(["the", "last", "dog"]), pretrained=str(path), cache_dir=False)
    assert res.table.tolist() == torch.tensor([[0.1, 0.2], [1.0, 2.0], [0.5, 0.6]]).tolist()


def test_token_share_uses_training_counts(tmp_path):
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(["the", "cat"], dim=2))
    vocab = Vocab(["<pad>", "the", "cat", "qqq"], counts={"the": 6, "cat": 2, "qqq": 2}, specials=("<pad>",))
    cov = build_table("glove", vocab, pretrained=str(path), cache_dir=False).coverage
    assert cov == {"rows_found": 2, "rows_total": 4, "row_share": 0.5, "token_share": 0.8, "duplicate_words": 0}


def test_cache_returns_identical_matrices_and_tracks_the_file(tmp_path):
    vectors = tt.word_vectors(dim=5)
    path = tt.write_text(tmp_path / "g.txt", vectors)
    cache = tmp_path / "cache"
    first = build_table("glove+standardize", VOCAB, pretrained=str(path), cache_dir=cache, seed=4)
    second = build_table("glove+standardize", VOCAB, pretrained=str(path), cache_dir=cache, seed=4)
    assert not first.info["cached"] and second.info["cached"]
    assert torch.equal(first.table, second.table)
    assert len(list((cache / "aligned").glob("*.pt"))) == 1
    # a changed file (size and mtime) is a different source: the cache must not serve the old rows
    vectors["cat"] = vectors["cat"] + 1.0
    tt.write_text(path, {**vectors, "extra": vectors["the"]})
    os.utime(path, ns=(1, 1))
    third = build_table("glove", VOCAB, pretrained=str(path), cache_dir=cache)
    assert not third.info["cached"]
    assert torch.equal(third.table[3], torch.tensor(vectors["cat"], dtype=torch.float32))


def test_npy_cache_tracks_the_vocabulary_file_too(tmp_path):
    vectors = tt.word_vectors(dim=3)
    path = tt.write_npy(tmp_path / "m.npy", vectors)
    cache = tmp_path / "cache"
    first = build_table("npy", VOCAB, pretrained=str(path), cache_dir=cache)
    names = list(vectors)
    names[0], names[1] = names[1], names[0]   # "the" and "cat" swap rows
    path.with_suffix(".vocab.txt").write_text("\r\n".join(names) + "\r\n", encoding="utf-8")
    second = build_table("npy", VOCAB, pretrained=str(path), cache_dir=cache)
    assert not second.info["cached"]
    assert torch.equal(second.table[2], first.table[3]) and torch.equal(second.table[3], first.table[2])


def test_cache_key_includes_vocabulary_and_lowercase(tmp_path):
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(dim=3))
    cache = tmp_path / "cache"
    kind = "text"
    a, hit_a = load_aligned(kind, str(path), VOCAB, False, cache)
    b, hit_b = load_aligned(kind, str(path), Vocab(VOCAB.tokens[:-1]), False, cache)
    c, hit_c = load_aligned(kind, str(path), VOCAB, True, cache)
    assert not (hit_a or hit_b or hit_c)
    d, hit_d = load_aligned(kind, str(path), VOCAB, False, cache)
    assert hit_d and torch.equal(d.rows, a.rows) and torch.equal(d.found, a.found)


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(dim=3))
    cache = tmp_path / "cache"
    ref = build_table("glove", VOCAB, pretrained=str(path), cache_dir=cache).table
    (entry,) = (cache / "aligned").glob("*.pt")
    entry.write_bytes(b"not a torch file")
    again = build_table("glove", VOCAB, pretrained=str(path), cache_dir=cache)
    assert not again.info["cached"] and torch.equal(again.table, ref)


def test_default_cache_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "envcache"))
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(dim=3))
    build_table("glove", VOCAB, pretrained=str(path))
    assert list((tmp_path / "envcache" / "aligned").glob("*.pt"))


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return tt.write_tiny_bert(tmp_path_factory.mktemp("bert"), dim=8)


@pytest.mark.slow  # imports transformers (several seconds on a busy machine)
def test_hf_source_round_trips_rows_and_maps_specials(bert_dir):
    pieces, weight = tt.bert_rows(bert_dir)
    vocab = Vocab(["<pad>", "<unk>", "<bos>", "<eos>", "the", "##s", "mat", "cats", "zzzq"])
    res = build_table("hf", vocab, pretrained=str(bert_dir), cache_dir=False)
    expect = {"<pad>": "[PAD]", "<unk>": "[UNK]", "<bos>": "[CLS]", "<eos>": "[SEP]", "the": "the",
              "##s": "##s", "mat": "mat"}
    for i, tok in enumerate(vocab.tokens):
        if tok in expect:
            assert torch.equal(res.table[i], weight[pieces[expect[tok]]]), tok
    assert res.coverage["rows_found"] == 7
    assert source_dim("hf", str(bert_dir)) == 8 and source_dim("bert", str(bert_dir)) == 8
    assert res.dim == 8


@pytest.mark.slow
def test_subword_mean_averages_the_tokenizer_pieces(bert_dir):
    pieces, weight = tt.bert_rows(bert_dir)
    vocab = Vocab(["the", "cats", "running", "zzzq"])
    res = build_table("bert", vocab, pretrained=str(bert_dir), oov="subword_mean", cache_dir=False)
    cats = weight[[pieces["cat"], pieces["##s"]]].double().mean(0).float()
    running = weight[[pieces["run"], pieces["##ning"]]].double().mean(0).float()
    assert torch.allclose(res.table[1], cats, atol=1e-7)
    assert torch.allclose(res.table[2], running, atol=1e-7)
    # no known piece: falls back to the mean of the found rows
    assert torch.allclose(res.table[3], weight[pieces["the"]], atol=1e-7)
    # with a transform the pieces are mapped into the transformed space (affine for standardize)
    std = build_table("bert+standardize", vocab, pretrained=str(bert_dir), oov="subword_mean", cache_dir=False)
    raw = weight[pieces["the"]].double()
    scale = (std.table[0].double()[0] - std.table[0].double()[1]) / (raw[0] - raw[1])
    shift = std.table[0].double() - raw * scale
    assert torch.allclose(std.table[1].double(), cats.double() * scale + shift, atol=1e-5)


@pytest.mark.slow
def test_hf_cache_round_trip(bert_dir, tmp_path):
    vocab = Vocab(["the", "cats", "dog"])
    a = build_table("hf", vocab, pretrained=str(bert_dir), oov="subword_mean", cache_dir=tmp_path)
    b = build_table("hf", vocab, pretrained=str(bert_dir), oov="subword_mean", cache_dir=tmp_path)
    assert b.info["cached"] and torch.equal(a.table, b.table)


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

WORDS_ST = st.lists(st.text(alphabet="abcXYZé中ß'.-_0", min_size=1, max_size=6), min_size=1, max_size=12,
                    unique=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=WORDS_ST, dim=st.integers(1, 6), seed=st.integers(0, 2**16),
       fmt=st.sampled_from(["glove", "word2vec", "word2vec_bin", "npy"]))
def test_round_trip_property(tmp_path_factory, words, dim, seed, fmt):
    """Any unique non-blank words, any D: every needed row comes back exactly, missing ones don't."""
    # a purely numeric first word with D=1 would read as an `N D` header; GloVe files cannot express it
    if fmt == "glove" and dim == 1 and words[0].isdigit():
        words = ["w" + words[0]] + words[1:]
    tmp = tmp_path_factory.mktemp("prop")
    vectors = tt.word_vectors(words, dim=dim, seed=seed)
    path = _write(fmt, tmp, vectors)
    rng = np.random.default_rng(seed)
    wanted = [w for w in words if rng.random() < 0.7] + ["<not-there>"]
    res = build_table(FAMILY[fmt], Vocab(wanted), pretrained=str(path), cache_dir=False, oov="zeros") \
        if len(wanted) > 1 else None
    if res is None:
        return
    for i, w in enumerate(wanted[:-1]):
        assert torch.equal(res.table[i], torch.tensor(vectors[w], dtype=torch.float32)), w
    assert res.table[-1].abs().sum() == 0 and res.coverage["rows_found"] == len(wanted) - 1


@pytest.mark.slow
def test_hf_reads_only_the_embedding_tensor_and_agrees_with_the_full_model(bert_dir, tmp_path, monkeypatch):
    from transformers import AutoModel, BertConfig, BertForMaskedLM

    from embinit.init import hf
    full = AutoModel.from_pretrained(bert_dir).get_input_embeddings().weight.detach()
    assert torch.equal(hf._weight_from_safetensors(bert_dir), full)
    # a checkpoint saved from a model with a head stores the tensor under the `bert.` prefix
    torch.manual_seed(1)
    mlm = BertForMaskedLM(BertConfig(vocab_size=12, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
                                     intermediate_size=8, max_position_embeddings=8))
    mlm.save_pretrained(tmp_path / "mlm")
    assert torch.equal(hf._weight_from_safetensors(tmp_path / "mlm"),
                       mlm.get_input_embeddings().weight.detach())
    # without the fast path (e.g. a .bin checkpoint) the full model load gives the same table
    vocab = Vocab(["the", "cats", "dog", "<pad>"])
    fast = build_table("hf", vocab, pretrained=str(bert_dir), oov="subword_mean", cache_dir=False).table
    monkeypatch.setattr(hf, "_weight_from_safetensors", lambda folder: None)
    slow = build_table("hf", vocab, pretrained=str(bert_dir), oov="subword_mean", cache_dir=False).table
    assert torch.equal(fast, slow)


@pytest.mark.slow
def test_t5_style_source_maps_eos_and_leaves_bos_to_the_oov_rule(tmp_path):
    from transformers import AutoModel
    folder = tt.write_tiny_t5(tmp_path / "t5")
    weight = AutoModel.from_pretrained(folder).get_input_embeddings().weight.detach()
    ids = {p: i for i, p in enumerate(tt.T5_PIECES)}
    vocab = Vocab(["<pad>", "<unk>", "<bos>", "<eos>", "▁the", "▁cat", "▁cats"])
    res = build_table("t5", vocab, pretrained=str(folder), oov="subword_mean", cache_dir=False)
    for i, piece in [(0, "<pad>"), (1, "<unk>"), (3, "</s>"), (4, "▁the"), (5, "▁cat")]:
        assert torch.equal(res.table[i], weight[ids[piece]]), piece
    assert res.coverage["rows_found"] == 5   # not <bos> (T5 has no cls/bos token), not "▁cats" (split)
    assert torch.allclose(res.table[6], weight[[ids["▁cat"], ids["s"]]].double().mean(0).float(), atol=1e-7)
    found = res.table[[0, 1, 3, 4, 5]].double()
    assert torch.allclose(res.table[2].double(), found.mean(0), atol=1e-7)   # unmapped special -> mean
    assert source_dim("mt5", str(folder)) == 8 and res.label == "T5"


def test_a_binary_file_whose_first_values_look_like_a_text_line_is_still_binary(tmp_path):
    """The first value's bytes here are `5\\n\\x12<`: read up to the newline the entry looks like the text
    line `the 5`, which the old rule took for a broken text file; the control byte says binary."""
    import struct

    from embinit.init.source_files import detect_format
    first = struct.unpack("<f", b"5\n\x12<")[0]
    vectors = {"the": np.array([first, 0.1, -0.2, 0.05]), "cat": np.array([0.3, 0.2, -0.1, 0.0])}
    path = tt.write_word2vec_bin(tmp_path / "v.bin", vectors)
    assert detect_format(path) == "word2vec_bin"
    broken = tmp_path / "broken.txt"   # a text file with a short line stays text, for its reader to name
    broken.write_text("2 4\nthe 0.1 0.2\ncat 0.3 0.2 -0.1 0.0\n")
    assert detect_format(broken) == "text"
    junk = tmp_path / "junk.txt"       # and with a word among its numbers (a file past the first 4 KB; within
    junk.write_text("500 4\nthe 0.1 abc 0.2 0.3\n" + "cat 0.3 0.2 -0.1 0.0\n" * 499)   # them see below)
    assert detect_format(junk) == "text"
    # D=1 tables whose float bytes read as text: '|' + a cut-off 4-byte character (hypothesis found it), and
    # four printable bytes; a file within 4 KB is read whole, and each is exactly N binary entries (a text
    # file that tiny whose bytes happen to be N such entries would be read as binary: it takes a line whose
    # length is exactly 4*D bytes after its word, and numbers that do not parse)
    for raw in (b"|\xf2\xb0>", b"ab c"):
        tiny = tt.write_word2vec_bin(tmp_path / "tiny.bin", {"w": np.array([struct.unpack("<f", raw)[0]])})
        assert detect_format(tiny) == "word2vec_bin", raw


@pytest.mark.slow
@pytest.mark.parametrize("in_place", [False, True], ids=["replaced", "written-in-place"])
def test_a_model_folder_whose_weights_change_at_the_same_size_and_mtime_is_aligned_again(tmp_path, in_place):
    """A model folder's aligned rows were cached by its files' (name, size, mtime): another checkpoint of
    the same architecture (every file the same size) copied over it with its mtimes (`rsync -a`, `cp -p`)
    was served the old checkpoint's rows. Keyed by the files' content now (the digests the trial keys
    compute anyway, memoized on disk)."""
    import shutil
    import time
    folder, other = tt.write_tiny_bert(tmp_path / "bert", dim=8), tt.write_tiny_bert(tmp_path / "b2", dim=8, seed=1)
    vocab = Vocab(["the", "cats", "dog"])
    cache = tmp_path / "cache"
    first = build_table("hf", vocab, pretrained=str(folder), cache_dir=cache)
    weights = folder / "model.safetensors"
    st = os.stat(weights)
    assert os.stat(other / "model.safetensors").st_size == st.st_size
    if in_place:
        time.sleep(0.05)
        weights.write_bytes((other / "model.safetensors").read_bytes())
    else:
        shutil.copyfile(other / "model.safetensors", tmp_path / "new")
        os.replace(tmp_path / "new", weights)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = build_table("hf", vocab, pretrained=str(folder), cache_dir=cache)
    assert not second.info["cached"] and not torch.equal(first.table, second.table)
    assert torch.equal(second.table, build_table("hf", vocab, pretrained=str(other), cache_dir=False).table)
