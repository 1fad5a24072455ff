"""The Hugging Face `datasets` path, exercised with `load_dataset` on local files (no network): the same
data through the hub conversion and through the local reader must give the same TaskData."""

import io
import json
import zipfile

import pytest

datasets = pytest.importorskip("datasets")

from embinit.errors import EmbinitError  # noqa: E402
from embinit.tasks import hub, load_task  # noqa: E402
from embinit.tasks.load import data_origin  # noqa: E402
from helpers.files import write  # noqa: E402
from helpers.hub_cache import snapshot  # noqa: E402
from helpers.iwslt import iwslt_release  # noqa: E402

DE = ["ein hund läuft .", "ein mann sitzt .", "eine frau läuft ."]
EN = ["A dog runs.", "A man sits.", "A woman runs."]


def use_local_hub(monkeypatch, tmp_path, builder, files, **kwargs):
    """Make hub._load_dataset return `load_dataset(builder, data_files=files)`; record what was asked."""
    asked = []

    def fake(path, config):
        asked.append((path, config))
        return datasets.load_dataset(builder, data_files={k: str(v) for k, v in files.items()},
                                     cache_dir=str(tmp_path / "hf-cache"), **kwargs)

    monkeypatch.setattr(hub, "_load_dataset", fake)
    return asked


def same_data(a, b):
    assert a.splits == b.splits and a.eval_splits == b.eval_splits and a.references == b.references
    assert a.vocab.tokens == b.vocab.tokens and a.num_labels == b.num_labels
    assert (a.src_vocab.tokens if a.src_vocab else None) == (b.src_vocab.tokens if b.src_vocab else None)


def test_multi30k_hub_matches_local_files(monkeypatch, tmp_path):
    files = {}
    for split in ("train", "validation", "test"):
        files[split] = tmp_path / f"{split}.jsonl"
        write(files[split], [json.dumps({"en": e, "de": d}) for d, e in zip(DE, EN)])
        stem = {"train": "train", "validation": "val", "test": "test_2016_flickr"}[split]
        write(tmp_path / "local" / f"{stem}.de", DE)
        write(tmp_path / "local" / f"{stem}.en", EN)
    asked = use_local_hub(monkeypatch, tmp_path, "json", files)
    kw = {"tokenizer": "whitespace", "min_freq": 1, "cache_dir": tmp_path / "c"}
    via_hub = load_task("multi30k", **kw)
    assert asked == [("bentrevett/multi30k", None)]
    assert via_hub.info["loaded_from"] == "hub:bentrevett/multi30k"
    same_data(via_hub, load_task("multi30k", data_dir=tmp_path / "local", **kw))
    # A second load is served from embinit's cache: no hub call, so it works offline.
    monkeypatch.setattr(hub, "_load_dataset", lambda p, c: pytest.fail("hub called on a cache hit"))
    assert load_task("multi30k", **kw).info["cache"] == "hit"


def hub_dataset(cache, repo_id, files, commit):
    """A cached download of a dataset repository's `files` at `commit`, which `refs/main` names."""
    snapshot(cache, repo_id, commit, files, ref="main")


def offline_hub(monkeypatch, tmp_path):
    """The hub cache in tmp_path/hub, HF_HUB_OFFLINE for embinit and huggingface_hub (read at import),
    embinit's cache in tmp_path/cache, no data folder."""
    import huggingface_hub
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBINIT_DATA_DIR", raising=False)
    monkeypatch.setattr(hub, "_load_dataset", lambda p, c: pytest.fail(f"datasets asked for {p}"))


IWSLT_ZIP = "data/2017-01-trnted/texts/de/en/de-en.zip"


def test_a_hub_dataset_fetched_at_another_commit_is_not_served_from_the_old_entry(monkeypatch, tmp_path):
    # embinit's task cache holds the data read at the hub cache's commit: once the dataset's `main` moved
    # and was fetched again, a load reads the new snapshot (the one the run's data source names)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    ref = tmp_path / "hub" / "datasets--bentrevett--multi30k" / "refs" / "main"
    ref.parent.mkdir(parents=True)
    files = {s: tmp_path / f"{s}.jsonl" for s in ("train", "validation", "test")}
    kw = {"tokenizer": "whitespace", "min_freq": 1, "cache_dir": tmp_path / "c"}
    seen = []
    for commit, english in (("a1" * 20, EN), ("b2" * 20, [e.upper() for e in EN])):
        ref.write_text(commit)
        for path in files.values():
            write(path, [json.dumps({"en": e, "de": d}) for d, e in zip(DE, english)])
        use_local_hub(monkeypatch, tmp_path / commit, "json", files)
        seen.append(load_task("multi30k", lowercase=False, **kw))
    assert seen[0].info["cache"] == "miss" and seen[1].info["cache"] == "miss"
    assert seen[1].references["test"] == [e.upper() for e in EN] != seen[0].references["test"]
    ref.write_text("a1" * 20)   # back at the first commit: its entry again
    monkeypatch.setattr(hub, "_load_dataset", lambda p, c: pytest.fail("hub called on a cache hit"))
    again = load_task("multi30k", lowercase=False, **kw)
    assert again.info["cache"] == "hit" and again.references == seen[0].references


def test_iwslt_hub_copy_is_the_release_zip_in_its_repository(monkeypatch, tmp_path):
    # `datasets` 4 and later refuse IWSLT2017's loading script ("Dataset scripts are no longer supported"):
    # the release zip the repository holds is read, from the hub cache, as a local release folder
    release = iwslt_release(tmp_path / "de-en")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path in sorted(release.iterdir()):
            z.write(path, f"de-en/{path.name}")
    commit = "c1" * 20
    hub_dataset(tmp_path / "hub", "IWSLT/iwslt2017", {IWSLT_ZIP: buf.getvalue()}, commit)
    offline_hub(monkeypatch, tmp_path)
    kw = {"tokenizer": "whitespace", "min_freq": 1, "cache_dir": False, "lowercase": False}
    via_hub = load_task("iwslt2017", **kw)
    assert via_hub.info["loaded_from"] == "hub:IWSLT/iwslt2017/iwslt2017-de-en"
    assert via_hub.info["archive"] == IWSLT_ZIP
    same_data(via_hub, load_task("iwslt2017", data_dir=release, **kw))
    assert via_hub.references["test"] == [f"Sentence tst{y} &amp; more ." for y in range(2010, 2016)]
    assert data_origin("iwslt2017", None) == f"hub:IWSLT/iwslt2017/iwslt2017-de-en@{commit}"
    assert load_task("iwslt2017", **kw).references == via_hub.references   # unpacked once, read again


def test_iwslt_offline_without_the_zip_names_the_dataset_and_the_way_out(monkeypatch, tmp_path):
    hub_dataset(tmp_path / "hub", "IWSLT/iwslt2017", {"README.md": b"no zip"}, "c2" * 20)
    offline_hub(monkeypatch, tmp_path)
    with pytest.raises(EmbinitError) as e:
        load_task("iwslt2017", tokenizer="whitespace", cache_dir=False)
    assert "the Hugging Face dataset 'IWSLT/iwslt2017/iwslt2017-de-en' could not be loaded" in str(e.value)
    assert "--data-dir" in str(e.value) and "unpacked de-en release archive" in str(e.value)


def test_a_hub_dataset_with_a_config_names_the_commit_of_its_repository(monkeypatch, tmp_path):
    # the commit is the repository's (nyu-mll/glue), whose cache folder the config (sst2) is not part of
    hub_dataset(tmp_path / "hub", "nyu-mll/glue", {"sst2/train.parquet": b"x"}, "9a" * 20)
    offline_hub(monkeypatch, tmp_path)
    assert data_origin("sst2", None) == "hub:nyu-mll/glue/sst2@" + "9a" * 20
    assert data_origin("mnli", None) == "hub:nyu-mll/glue/mnli@" + "9a" * 20


def test_sst2_hub_csv_matches_local_tsv(monkeypatch, tmp_path):
    rows = ["sentence\tlabel", "a great film\t1", "a dull film\t0", "great fun\t1"]
    write(tmp_path / "local" / "train.tsv", rows)
    write(tmp_path / "local" / "dev.tsv", rows[:3])
    files = {"train": tmp_path / "local" / "train.tsv", "validation": tmp_path / "local" / "dev.tsv"}
    asked = use_local_hub(monkeypatch, tmp_path, "csv", files, delimiter="\t")
    kw = {"tokenizer": "whitespace", "min_freq": 1, "cache_dir": False}
    via_hub = load_task("sst2", **kw)
    assert asked == [("nyu-mll/glue", "sst2")]
    same_data(via_hub, load_task("sst2", data_dir=tmp_path / "local", **kw))


def test_mnli_hub_splits_and_int_labels(monkeypatch, tmp_path):
    files = {}
    for split in ("train", "validation_matched", "validation_mismatched"):
        files[split] = tmp_path / f"{split}.jsonl"
        write(files[split], [json.dumps({"premise": "the cat sat", "hypothesis": "a cat sat", "label": 0}),
                             json.dumps({"premise": "the cat sat", "hypothesis": "no cat", "label": 2})])
    use_local_hub(monkeypatch, tmp_path, "json", files)
    data = load_task("mnli", tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.eval_splits == ["dev_matched", "dev_mismatched"] and data.num_labels == 3
    assert [r[2] for r in data.splits["dev_mismatched"]] == [0, 2]
    assert data.vocab.decode(data.splits["train"][1][1]) == ["no", "cat"]


def test_mnli_hub_matched_and_mismatched_land_in_their_own_splits(monkeypatch, tmp_path):
    """Each hub validation split in its own dev split (above, both held the same rows)."""
    rows = {"train": [0, 2], "validation_matched": [0], "validation_mismatched": [2, 1]}
    files = {}
    for split, labels in rows.items():
        files[split] = tmp_path / f"{split}.jsonl"
        write(files[split], [json.dumps({"premise": "the cat sat", "hypothesis": f"h{i}", "label": y})
                             for i, y in enumerate(labels)])
    use_local_hub(monkeypatch, tmp_path, "json", files)
    data = load_task("mnli", tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert [r[2] for r in data.splits["dev_matched"]] == [0]
    assert [r[2] for r in data.splits["dev_mismatched"]] == [2, 1]


def test_hub_label_out_of_range(monkeypatch, tmp_path):
    files = {s: tmp_path / f"{s}.jsonl" for s in ("train", "validation")}
    for path in files.values():
        write(path, [json.dumps({"sentence": "fine", "label": 1}),
                     json.dumps({"sentence": "odd", "label": 5})])
    use_local_hub(monkeypatch, tmp_path, "json", files)
    with pytest.raises(EmbinitError, match=r"hub:nyu-mll/glue/sst2 split 'train' row 1: unknown label 5"):
        load_task("sst2", tokenizer="whitespace", cache_dir=False)


def test_hub_missing_split(monkeypatch, tmp_path):
    write(tmp_path / "train.jsonl", [json.dumps({"sentence": "fine", "label": 1})])
    use_local_hub(monkeypatch, tmp_path, "json", {"train": tmp_path / "train.jsonl"})
    with pytest.raises(EmbinitError, match=r"has no split 'validation'; it has \['train'\]"):
        load_task("sst2", tokenizer="whitespace", cache_dir=False)


def test_wikitext_hub_text_matches_local_tokens(monkeypatch, tmp_path):
    files = {}
    for split, name in (("train", "train"), ("validation", "valid"), ("test", "test")):
        files[split] = tmp_path / "local" / f"wiki.{name}.tokens"
        write(files[split], [" ", f" = {name} = ", " ", " the cat sat . "])
    asked = use_local_hub(monkeypatch, tmp_path, "text", files)
    kw = {"tokenizer": "whitespace", "min_freq": 1, "cache_dir": False}
    via_hub = load_task("wikitext2", **kw)
    assert asked == [("Salesforce/wikitext", "wikitext-2-raw-v1")]
    same_data(via_hub, load_task("wikitext2", data_dir=tmp_path / "local", **kw))
    assert via_hub.info["stream_tokens"]["train"] == 1 + 4 + 1 + 5   # every line ends with <eos>
