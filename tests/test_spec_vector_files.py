"""The spec's check reads each local word-vector file it names (embinit.spec.vector_files): a broken row
failed each trial of the init only once the sweep had started (after other inits had trained)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from embinit.errors import EmbinitError
from embinit.spec import SpecError, check_local_paths, load_spec
from embinit.spec.full_check import check_spec
from embinit.spec.vector_files import vector_file_problems


def _glove(path, rows):
    path.write_bytes(b"".join(rows))
    return path


GOOD = [b"the 0.1 0.2 0.3\n", b"cat 0.4 0.5 0.6\n", b"dog 0.7 0.8 0.9\n"]


def _spec(tmp_path, vectors):
    return {"name": "v", "tasks": [{"task": "synthetic_translation", "d_model": 3, "heads": 1}],
            "inits": ["xavier", {"tgt": "glove", "src": "xavier"}], "seeds": 1, "pretrained": {"glove": str(vectors)}}


def test_a_broken_vector_file_is_a_spec_problem_with_each_bad_line(tmp_path):
    bad = _glove(tmp_path / "bad.txt", GOOD[:1] + [b"cat 0.4 0.5\n", b"\xe9t\xe9 0.1 0.2 0.3\n"] + GOOD[2:])
    with pytest.raises(SpecError) as e:
        check_spec(_spec(tmp_path, bad))
    found = dict(e.value.problems)
    assert f"{bad}:2: expected a word and 3 values" in found["pretrained.glove"], found
    assert f"{bad}:3" in found["pretrained.glove"] and "UTF-8" in found["pretrained.glove"], found
    with pytest.raises(SpecError, match="bad.txt:2: expected a word and 3 values"):
        check_local_paths(load_spec(_spec(tmp_path, bad)))   # the sweep's own check (the service's local Ray)
    good = _glove(tmp_path / "good.txt", GOOD)
    assert check_spec(_spec(tmp_path, good)).inits[1].tgt == "glove"
    check_local_paths(load_spec(_spec(tmp_path, good)))


def test_a_file_whose_first_line_has_no_values_is_one_problem_not_a_dimension_of_0(tmp_path):
    """A binary file given as GloVe text: its first line was the file's problem and, read by the size
    check as a word with 0 values, a second one, 'the init has dimension 0 but the model's d_model is 3'."""
    binary = _glove(tmp_path / "vectors.bin", [b"\x8f\x01\xfe\n", b"\x00\x17\x9a\n"])
    with pytest.raises(SpecError) as e:
        check_spec(_spec(tmp_path, binary))
    assert e.value.problems == [("pretrained.glove", f"{binary}:1: expected `word v1 ... vD` or an `N D` header, "
                                                     f"got b'\\x8f\\x01\\xfe\\n'")]


def test_a_header_s_row_count_and_a_npy_without_its_vocabulary(tmp_path):
    short = _glove(tmp_path / "w2v.txt", [b"5 3\n"] + GOOD)   # a truncated download
    np.save(tmp_path / "m.npy", np.zeros((3, 3), dtype=np.float32))
    npy = str(tmp_path / "m.npy")
    found = dict(vector_file_problems([("pretrained.glove", str(short)), ("inits[0].pretrained", npy),
                                       ("data_dir", str(short))]))   # not a vector field: not read
    assert "the header says 5 rows but the file has 3" in found["pretrained.glove"], found
    assert "no vocabulary file for" in found["inits[0].pretrained"], found
    assert set(found) == {"pretrained.glove", "inits[0].pretrained"}
    (tmp_path / "m.vocab.txt").write_text("the\ncat\ndog\n")
    assert vector_file_problems([("inits[0].pretrained", str(tmp_path / "m.npy"))]) == []


def test_a_file_is_read_again_once_it_changes(tmp_path):
    path = _glove(tmp_path / "g.txt", GOOD)
    assert vector_file_problems([("pretrained.glove", str(path))]) == []
    _glove(path, GOOD + [b"owl 1.0\n"])
    os.utime(path, ns=(1, 1))   # the mtime differs whatever the clock's resolution
    assert "g.txt:4: expected a word and 3 values" in vector_file_problems([("pretrained.glove", str(path))])[0][1]


def _problems_of_words(path) -> list[str]:
    """What the check said before it streamed: the error of reading every word (`vectors.words`)."""
    from embinit.errors import EmbinitError
    from embinit.init import vectors
    try:
        vectors.words(path)
        return []
    except EmbinitError as e:
        return [str(e)]


def test_the_check_finds_what_reading_every_word_finds(tmp_path):
    """The check reads a file through without keeping its words; what it finds is what `vectors.words`
    (which the check called before) finds, in every format it reads and for every kind of problem."""
    import gzip

    from embinit.init import testing
    from embinit.spec.vector_files import file_problems
    vecs = testing.word_vectors([f"w{i}" for i in range(300)] + ["caf\u00e9"], dim=4)
    clean = testing.write_text(tmp_path / "clean.txt", vecs).read_bytes() + b"w7 0.1 0.2 0.3 0.4\n"  # w7 again
    lines = clean.splitlines(keepends=True)
    files = {
        "clean.txt": clean, "header.txt": b"302 4\n" + clean, "short-header.txt": b"400 4\n" + clean,
        "broken.txt": b"".join(lines[:5] + [b"cat 0.4 0.5\n", b"\xe9t\xe9 0.1 0.2 0.3 0.4\n", b"\n"] + lines[5:]
                               + [b" 0.1 0.2 0.3 0.4\n", b"two words 0.1 0.2 0.3 0.4\n"]),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "broken.txt.gz").write_bytes(gzip.compress(files["broken.txt"]))
    binary = testing.write_word2vec_bin(tmp_path / "w2v.bin", vecs).read_bytes()
    (tmp_path / "cut.bin").write_bytes(binary[:-30])
    testing.write_word2vec_bin(tmp_path / "w2v.bin.gz", vecs)
    said = {}
    for path in sorted(p for p in tmp_path.iterdir() if p.is_file()):
        said[path.name] = file_problems(path)
        assert said[path.name] == _problems_of_words(path), path.name
    assert [name for name, problems in said.items() if problems] == ["broken.txt", "broken.txt.gz", "cut.bin",
                                                                    "short-header.txt"]


def test_the_check_holds_no_word_of_the_file(tmp_path):
    """A 2M-word GloVe file's words alone are a few hundred MB: the check's peak memory does not grow with
    the file, and is a small part of what holding every word takes (a ratio measured in one run;
    bench/bench_vector_check.py measures a 500k-word file)."""
    import tracemalloc

    from embinit.init import vectors
    from embinit.spec.vector_files import file_problems
    path = tmp_path / "big.txt"
    path.write_bytes(b"".join(b"word%07d 0.1 0.2\n" % i for i in range(20_000)))

    def peak(fn) -> int:
        tracemalloc.start()
        try:
            fn(path)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    holding, checking = peak(vectors.words), peak(file_problems)
    assert checking * 10 < holding, (checking, holding)


def test_the_similarity_reference_file_is_read_through_too(tmp_path):
    """The similarity analysis's fixed reference was checked to exist only: a broken vector file failed
    every trial once the sweep had started. A checkpoint (.pt) or .npy reference is the trial's to read."""
    bad = _glove(tmp_path / "ref.txt", GOOD[:1] + [b"cat 0.4\n"] + GOOD[2:])
    (tmp_path / "ref.pt").write_bytes(b"not read here")
    spec = {**_spec(tmp_path, _glove(tmp_path / "g.txt", GOOD)), "inits": ["xavier"]}
    for reference, problem in ((bad, f"{bad}:2: expected a word and 3 values"), (tmp_path / "ref.pt", None)):
        found = dict(vector_file_problems([("analyses.similarity.reference", str(reference))]))
        assert (found.get("analyses.similarity.reference", "").startswith(problem) if problem else found == {}), found
    with pytest.raises(SpecError) as e:
        check_spec({**spec, "analyses": {"similarity": {"reference": str(bad)}}})
    assert dict(e.value.problems)["analyses.similarity.reference"].startswith(f"{bad}:2: expected a word and 3 values")


def test_an_init_from_that_is_no_checkpoint_is_a_spec_problem_and_a_trials_error_names_it(tmp_path):
    """A GloVe file given as `init_from` passed the check and failed every trial with torch's "cannot read
    init_from checkpoint g.txt: pop from empty list"."""
    import torch

    from embinit.train.checkpoint import read
    glove = _glove(tmp_path / "g.txt", GOOD)
    why = ("not a PyTorch checkpoint (a trial's best.pt: the zip archive torch.save writes); it starts with "
           f"{b''.join(GOOD)[:40]!r}")
    assert vector_file_problems([("tasks[0].init_from", str(glove))]) == [("tasks[0].init_from", f"{glove}: {why}")]
    with pytest.raises(SpecError) as e:
        check_spec({**_spec(tmp_path, glove), "inits": ["xavier"], "defaults": {"init_from": str(glove)}})
    assert dict(e.value.problems)["defaults.init_from"] == f"{glove}: {why}"
    with pytest.raises(EmbinitError, match=f"cannot read init_from checkpoint {glove}: {re.escape(why)}$"):
        read(glove, "init_from checkpoint")
    torch.save({"tok": torch.zeros(2, 3)}, tmp_path / "best.pt")   # a checkpoint: no problem
    assert vector_file_problems([("tasks[0].init_from", str(tmp_path / "best.pt"))]) == []


def test_a_tokenizer_that_is_a_file_or_a_folder_without_one_is_a_spec_problem(tmp_path):
    """Both passed the check and failed every trial: a file as "tokenizer folder 'vocab.txt' does not
    exist" (it does), a folder without tokenizer files with transformers' "Couldn't instantiate ..."."""
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    vocab = tmp_path / "tok" / "vocab.txt"
    found = dict(vector_file_problems([("tasks[0].tokenizer", str(vocab)),
                                       ("axes.tokenizer[1]", str(tmp_path / "model")),
                                       ("defaults.tokenizer", str(tmp_path / "tok")), ("tasks[1].tokenizer", "spacy")]))
    assert found == {
        "tasks[0].tokenizer": f"tokenizer {str(vocab)!r} is a file; give the folder that holds a tokenizer's files "
                              f"({tmp_path / 'tok'}, if this is one of them), a registered tokenizer ['spacy', "
                              f"'whitespace', 'gpt2'] or a hub id",
        "axes.tokenizer[1]": f"tokenizer folder '{tmp_path / 'model'}' holds no tokenizer: the folder holds "
                             f"['config.json']; a tokenizer folder needs tokenizer.json, or vocab.json + merges.txt "
                             f"(byte-level BPE, as GPT-2's), or vocab.txt (WordPiece), or a SentencePiece .model, or "
                             f"OpenAI's original GPT-2 files encoder.json + vocab.bpe alone (read as they are; they "
                             f"are vocab.json + merges.txt under other names, so renaming them converts the folder)"}


def _counted_reads(monkeypatch) -> list:
    from embinit.init import vectors
    reads, real = [], vectors.read_through
    monkeypatch.setattr(vectors, "read_through", lambda p: reads.append(p) or real(p))
    return reads


def _new_process(monkeypatch):
    from embinit import file_inputs
    from embinit.spec import vector_files
    monkeypatch.setattr(vector_files, "_read", {})
    monkeypatch.setattr(file_inputs, "_memo", {})


def test_a_sound_file_is_read_through_once_per_content_not_once_per_process(tmp_path, monkeypatch):
    """Each `embinit run` (a rerun of a finished spec too), dry run and service process read every vector
    file of the spec through: ~14 s for a 2.2M-word 300d file page-cached, a minute from disk. A file
    found sound is remembered by its content, at another path too; other bytes are read again."""
    reads = _counted_reads(monkeypatch)
    path = _glove(tmp_path / "g.txt", GOOD)
    for _ in range(3):
        _new_process(monkeypatch)
        assert vector_file_problems([("pretrained.glove", str(path))]) == []
    copy = _glove(tmp_path / "copy.txt", GOOD)
    _new_process(monkeypatch)
    assert vector_file_problems([("pretrained.glove", str(copy))]) == []
    assert len(reads) == 1
    st = os.stat(path)   # other bytes of the same size and mtime: read, and the problem found
    path.write_bytes(GOOD[0] + b"cat 0.4 0.500.6\n" + GOOD[2])   # a value lost
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    _new_process(monkeypatch)
    assert "g.txt:2: expected a word and 3 values" in vector_file_problems([("pretrained.glove", str(path))])[0][1]
    assert len(reads) == 2


def test_a_broken_file_and_another_reader_s_mark_are_read_again(tmp_path, monkeypatch):
    from embinit import sound_marks
    reads = _counted_reads(monkeypatch)
    bad = _glove(tmp_path / "bad.txt", GOOD[:1] + [b"cat 0.4 0.5\n"])
    for _ in range(2):
        _new_process(monkeypatch)
        assert "bad.txt:2: expected a word and 3 values" in vector_file_problems([("pretrained.glove", str(bad))])[0][1]
    good = _glove(tmp_path / "good.txt", GOOD)
    _new_process(monkeypatch)
    assert vector_file_problems([("pretrained.glove", str(good))]) == []
    _new_process(monkeypatch)
    monkeypatch.setattr(sound_marks, "source_digest", lambda: "other-code")   # embinit changed since
    assert vector_file_problems([("pretrained.glove", str(good))]) == []
    assert len(reads) == 4


def test_an_unwritable_cache_only_costs_a_read(tmp_path, monkeypatch):
    reads = _counted_reads(monkeypatch)
    (tmp_path / "ro").write_text("a file where the cache folder would be")
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "ro"))
    path = _glove(tmp_path / "g.txt", GOOD)
    for _ in range(2):
        _new_process(monkeypatch)
        assert vector_file_problems([("pretrained.glove", str(path))]) == []
    assert len(reads) == 2
