"""Vector files in the forms they are published in: GloVe's and fastText's English vectors come as zip
files (glove.840B.300d.zip, crawl-300d-2M.vec.zip) of one file; glove.6B.zip holds four; fastText's
Common Crawl vectors come beside its models (cc.de.300.vec.gz and cc.de.300.bin.gz)."""

import zipfile

import numpy as np
import pytest

from embinit.errors import EmbinitError
from embinit.init import vectors
from embinit.init.source_files import detect_format, file_dim
from embinit.init.testing import write_text, write_word2vec_bin
from embinit.spec.vector_files import file_problems

VECS = {",": np.array([0.1, 0.2, 0.3]), ". . .": np.array([0.4, 0.5, 0.6]), "the": np.array([-1.0, 0.0, 2.5]),
        "Straße": np.array([0.7, -0.8, 0.9])}


def _zip(path, *members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member in members:
            z.write(member, member.name)
    return path


@pytest.mark.parametrize("header", [False, True])
def test_a_one_file_zip_reads_as_its_file(tmp_path, header):
    plain = write_text(tmp_path / ("crawl-300d-2M.vec" if header else "glove.840B.300d.txt"), VECS, header=header)
    archive = _zip(tmp_path / f"{plain.name}.zip", plain)
    assert detect_format(archive) == "text" and file_dim(archive, "text") == 3
    tokens = ["the", "Straße", ". . .", "missing"]
    got, want = vectors.load_text(archive, tokens), vectors.load_text(plain, tokens)
    assert got.found.tolist() == want.found.tolist() == [0, 1, 2]
    assert np.array_equal(got.rows.numpy(), want.rows.numpy())
    assert vectors.words(archive) == list(VECS)
    assert file_problems(archive) == []


def test_a_zipped_word2vec_binary_reads_as_its_file(tmp_path):
    plain = write_word2vec_bin(tmp_path / "vectors.bin", {w: v for w, v in VECS.items() if " " not in w})
    archive = _zip(tmp_path / "vectors.bin.zip", plain)
    assert detect_format(archive) == "word2vec_bin"
    got = vectors.load_word2vec_binary(archive, ["the", ","])
    assert got.found.tolist() == [0, 1]
    assert np.allclose(got.rows.numpy(), np.stack([VECS["the"], VECS[","]]))


def test_a_zip_of_several_files_names_them_and_the_fix(tmp_path):
    members = [write_text(tmp_path / f"glove.6B.{d}d.txt", VECS) for d in (50, 100)]
    archive = _zip(tmp_path / "glove.6B.zip", *members)
    [problem] = file_problems(archive)
    assert "glove.6B.50d.txt" in problem and "glove.6B.100d.txt" in problem and "unzip" in problem
    assert "UTF-8" not in problem
    with pytest.raises(EmbinitError, match="unzip"):
        vectors.load_text(archive, ["the"])


@pytest.mark.parametrize("name", ["cc.de.300.bin", "cc.de.300.bin.gz"])
def test_a_fasttext_model_is_named_as_one_with_its_vec(tmp_path, name):
    import gzip
    import struct
    # a fastText .bin: int32 magic 793712314, version 12, its args; then dictionary and matrices
    data = struct.pack("<ii", 793712314, 12) + struct.pack("<12i", 300, 5, 5, 5, 1, 1, 2000000, 10, 1, 1, 3, 6) \
        + b"\x00" * 5000 + b"\n" + b"\x01" * 100
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    [problem] = file_problems(path)
    assert "fastText model" in problem and ".vec" in problem and len(problem) < 600
    assert "UTF-8" not in problem
