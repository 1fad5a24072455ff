"""The on-disk cache: a hit returns identical data, and the key changes with everything data depends on."""

import os
import pickle
import shutil

import pytest

from embinit.tasks import cache, load_task, tokenization, tokenizer_backends
from embinit.tasks.load import plan
from helpers.files import write


@pytest.fixture
def sst2_dir(tmp_path):
    folder = tmp_path / "sst2"
    write(folder / "train.tsv", ["sentence\tlabel", "a great film\t1", "a dull film\t0", "great fun\t1"])
    write(folder / "dev.tsv", ["sentence\tlabel", "a fun film\t1"])
    return folder


def load(folder, cache_dir, **kw):
    kw = {"tokenizer": "whitespace", "min_freq": 1, **kw}
    return load_task("sst2", data_dir=folder, cache_dir=cache_dir, **kw)


def test_hit_returns_identical_data(sst2_dir, tmp_path):
    first = load(sst2_dir, tmp_path / "c")
    second = load(sst2_dir, tmp_path / "c")
    assert (first.info["cache"], second.info["cache"]) == ("miss", "hit")
    assert second.splits == first.splits and second.eval_splits == first.eval_splits
    assert second.vocab.tokens == first.vocab.tokens and second.vocab.counts == first.vocab.counts
    assert second.vocab.specials == first.vocab.specials
    assert second.vocab.fingerprint() == first.vocab.fingerprint()
    assert second.num_labels == first.num_labels and second.info["cache_key"] == first.info["cache_key"]
    assert second.info["sizes"] == first.info["sizes"]
    entries = os.listdir(tmp_path / "c" / "tasks")
    assert entries == [f"sst2-{first.info['cache_key']}.pkl"]      # no temporary file left behind


def test_cached_result_is_really_read_from_disk(sst2_dir, tmp_path):
    first = load(sst2_dir, tmp_path / "c")
    path = first.info["cache_path"]
    with open(path, "rb") as f:
        payload = pickle.load(f)
    assert payload["vocab"]["__vocab__"] == first.vocab.tokens    # stored as plain data, not a Vocab pickle
    payload["splits"]["dev"] = [([1, 1], 0)]
    cache.save(cache.Path(path), payload)
    assert load(sst2_dir, tmp_path / "c").splits["dev"] == [([1, 1], 0)]


@pytest.mark.parametrize("change", [
    {"min_freq": 2}, {"max_len": 2}, {"max_train_examples": 2}, {"lowercase": False},
])
def test_key_changes_with_each_setting(sst2_dir, tmp_path, change):
    base = load(sst2_dir, tmp_path / "c")
    again = load(sst2_dir, tmp_path / "c", **change)
    assert again.info["cache"] == "miss" and again.info["cache_key"] != base.info["cache_key"]
    assert load(sst2_dir, tmp_path / "c", **change).info["cache"] == "hit"


def test_key_depends_on_tokenizer_identity(sst2_dir, tmp_path, monkeypatch):
    # plan() decides the key without loading a tokenizer, so this needs no spaCy.
    keys = {name: plan("sst2", sst2_dir, tokenizer=name).key for name in ("spacy", "whitespace", "gpt2")}
    assert len(set(keys.values())) == 3
    monkeypatch.setattr(tokenization.importlib.metadata, "version", lambda pkg: "99.0")
    assert plan("sst2", sst2_dir, tokenizer="spacy").key != keys["spacy"]    # spaCy upgrade misses
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "tokenizer.json").write_text("{}")
    before = plan("sst2", sst2_dir, tokenizer=str(hf)).key
    (hf / "tokenizer.json").write_text('{"changed": 1}')
    changed = plan("sst2", sst2_dir, tokenizer=str(hf)).key
    assert changed != before
    (hf / "model.safetensors").write_bytes(b"weights")    # weights do not define the tokenizer
    assert plan("sst2", sst2_dir, tokenizer=str(hf)).key == changed
    st = os.stat(hf / "tokenizer.json")   # other bytes of its size, its mtime kept (cp -p, rsync -a)
    (hf / "tokenizer.json").write_text('{"changed": 2}')
    os.utime(hf / "tokenizer.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert plan("sst2", sst2_dir, tokenizer=str(hf)).key not in (before, changed)
    shutil.copytree(hf, tmp_path / "copy")   # the same files elsewhere: the same tokenization
    assert plan("sst2", sst2_dir, tokenizer=str(tmp_path / "copy")).key == plan("sst2", sst2_dir, tokenizer=str(hf)).key


def test_changed_file_misses(sst2_dir, tmp_path):
    base = load(sst2_dir, tmp_path / "c")
    write(sst2_dir / "dev.tsv", ["sentence\tlabel", "a fun film\t1", "dull\t0"])
    again = load(sst2_dir, tmp_path / "c")
    assert again.info["cache"] == "miss" and len(again.splits["dev"]) == 2
    assert again.info["cache_key"] != base.info["cache_key"]


def test_synthetic_key_includes_seed(tmp_path):
    kw = {"tokenizer": "whitespace", "cache_dir": tmp_path / "c"}
    a = load_task("synthetic_classification", seed=1, **kw)
    b = load_task("synthetic_classification", seed=2, **kw)
    assert b.info["cache"] == "miss" and a.splits != b.splits
    assert load_task("synthetic_classification", seed=1, **kw).info["cache"] == "hit"


def test_corrupt_entry_is_rebuilt(sst2_dir, tmp_path):
    first = load(sst2_dir, tmp_path / "c")
    with open(first.info["cache_path"], "wb") as f:
        f.write(b"\x80\x05truncated")
    again = load(sst2_dir, tmp_path / "c")
    assert again.info["cache"] == "miss" and again.splits == first.splits
    assert load(sst2_dir, tmp_path / "c").info["cache"] == "hit"


def test_default_location_and_disabling(sst2_dir, tmp_path):
    data = load(sst2_dir, None)
    assert data.info["cache_path"].startswith(str(tmp_path / "default-cache" / "tasks"))
    off = load(sst2_dir, False)
    assert off.info["cache"] == "off" and off.info["cache_path"] is None


def test_failed_write_leaves_no_partial_entry(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(cache.pickle, "dump", boom)
    with pytest.raises(RuntimeError):
        cache.save(tmp_path / "x" / "e.pkl", {"a": 1})
    assert os.listdir(tmp_path / "x") == []


def test_a_hit_loads_no_tokenizer(sst2_dir, tmp_path, monkeypatch):
    """The point of the cache: a second trial pays neither for spaCy nor for tokenizing."""
    monkeypatch.setitem(tokenizer_backends.BACKENDS, "spacy", tokenizer_backends.WhitespaceBackend)  # a cheap stand-in
    first = load(sst2_dir, tmp_path / "c", tokenizer="spacy")

    def no_backend(spec):
        raise AssertionError("a tokenizer was loaded on a cache hit")

    monkeypatch.setitem(tokenizer_backends.BACKENDS, "spacy", no_backend)
    again = load(sst2_dir, tmp_path / "c", tokenizer="spacy")
    assert again.info["cache"] == "hit" and again.splits == first.splits
    assert again.detokenize(["a", "film", "."]) == "a film."
