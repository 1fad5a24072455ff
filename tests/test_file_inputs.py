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
