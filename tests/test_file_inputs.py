"""Trial keys count file inputs by content (embinit.file_inputs): the same pretrained file, data folder or
checkpoint at another path is the same trial; other bytes are another trial; a hub id or a name stays as
written; each file is read once per version, not once per key."""

from __future__ import annotations

import os
import shutil

import pytest

from embinit import file_inputs
from embinit.config import TrialConfig
from embinit.tracking.trial_run import resolved_params


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch):
    monkeypatch.setattr(file_inputs, "_memo", {})


def glove(path, scale=1.0):
    path.write_text("".join(f"w{i} {i * scale:.1f} {1 - i * scale:.1f}\n" for i in range(5)))
    return str(path)


def cfg(**kw):
    return TrialConfig(task="synthetic_translation", init="glove", **kw)


def test_a_copied_or_moved_pretrained_file_keeps_the_key(tmp_path):
    (tmp_path / "a").mkdir()
    first = glove(tmp_path / "a" / "vec.txt")
    copy = tmp_path / "elsewhere" / "renamed.txt"
    copy.parent.mkdir()
    shutil.copy(first, copy)
    assert cfg(pretrained=first).key() == cfg(pretrained=str(copy)).key()
    moved = tmp_path / "moved.txt"
    os.replace(first, moved)
    assert cfg(pretrained=str(moved)).key() == cfg(pretrained=str(copy)).key()
    # the path stays in the config, so in the MLflow params, for provenance
    assert resolved_params(cfg(pretrained=str(moved)).to_dict())["pretrained"] == str(moved)


def test_other_bytes_at_the_same_path_are_another_trial(tmp_path):
    path = glove(tmp_path / "vec.txt")
    before = cfg(pretrained=path).key()
    glove(tmp_path / "vec.txt", scale=2.0)
    os.utime(path, ns=(1, 1))  # a new version even on a coarse-mtime file system
    assert cfg(pretrained=path).key() != before


def test_a_copied_data_folder_keeps_the_key_and_hidden_files_do_not_count(tmp_path):
    data = tmp_path / "multi30k"
    (data / "sub").mkdir(parents=True)
    (data / "train.de").write_text("ein hund\n")
    (data / "sub" / "val.en").write_text("a dog\n")
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    (copy / ".DS_Store").write_text("junk")
    assert cfg(data_dir=str(data)).key() == cfg(data_dir=str(copy)).key()
    (copy / "sub" / "val.en").write_text("a cat\n")
    assert cfg(data_dir=str(data)).key() != cfg(data_dir=str(copy)).key()
    (copy / "sub" / "val.en").write_text("a dog\n")
    (copy / "extra.txt").write_text("x\n")  # another file: other inputs
    assert cfg(data_dir=str(data)).key() != cfg(data_dir=str(copy)).key()


def test_hub_ids_names_and_missing_paths_stay_as_written(tmp_path):
    assert file_inputs.content_id("bert-base-uncased") is None
    assert file_inputs.content_id("spacy") is None
    assert file_inputs.content_id(str(tmp_path / "missing.txt")) is None
    assert cfg(pretrained="bert-base-uncased").key() != cfg(pretrained="bert-large-uncased").key()
    assert cfg(pretrained=str(tmp_path / "a.txt")).key() != cfg(pretrained=str(tmp_path / "b.txt")).key()
    assert cfg().key() == TrialConfig(task="synthetic_translation", init="glove").key()


def test_each_file_is_hashed_once_not_once_per_key(tmp_path, monkeypatch):
    path = glove(tmp_path / "vec.txt")
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("x\n")
    hashed = []
    real = file_inputs.file_digest
    monkeypatch.setattr(file_inputs, "file_digest", lambda p, *a: hashed.append(p) or real(p, *a))
    keys = {cfg(pretrained=path, data_dir=str(data), seed=s).key() for s in range(50)}
    assert len(keys) == 50 and len(hashed) == 2


def _same_size_and_mtime(path, text: str, in_place: bool) -> None:
    """Give `path` other bytes of its size and set its mtime back: `cp -p`/`rsync -t`/`tar x` of another
    version over it (a new inode), or a write in place whose mtime a tool restored (`touch -r`)."""
    st = os.stat(path)
    assert len(text.encode()) == st.st_size
    if in_place:
        import time
        time.sleep(0.05)   # past the ctime's clock tick
        with open(path, "r+b") as f:
            f.write(text.encode())
    else:
        other = path.with_name(path.name + ".new")
        other.write_text(text)
        os.replace(other, path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.mark.parametrize("in_place", [False, True], ids=["replaced", "written-in-place"])
@pytest.mark.parametrize("new_process", [False, True], ids=["same-process", "disk-memo"])
def test_other_bytes_of_the_same_size_and_mtime_are_another_key(tmp_path, monkeypatch, in_place, new_process):
    """Size and mtime alone were the digests' memo key, in this process and on disk: a file replaced by
    another version of its size with its mtime (or written in place, the mtime set back) kept its old
    digest, so its trials were taken as finished and its aligned rows read from the old file's cache."""
    path = tmp_path / "vec.txt"
    path.write_text("a 0.1 0.2\nb 0.3 0.4\n")
    before = cfg(pretrained=str(path)).key()
    _same_size_and_mtime(path, "a 0.9 0.2\nb 0.3 0.4\n", in_place)
    if new_process:
        monkeypatch.setattr(file_inputs, "_memo", {})
    after = cfg(pretrained=str(path)).key()
    file_inputs._memo.clear()
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "another-cache"))
    assert after != before and after == cfg(pretrained=str(path)).key()   # the key of the bytes now there
