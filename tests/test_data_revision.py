"""`data_revision`: a task entry (or `embinit train --data-revision`) pins the snapshot of its hub dataset
(a commit, a tag or a branch). The loaders read that snapshot, the trial key holds the pin as written (only
when set: every other key is unchanged), the run's data source and embinit's task cache name the commit
read, and the spec check refuses a pin that cannot apply, or, offline, that the hub cache lacks."""

from __future__ import annotations

import dataclasses
import io
import zipfile
from pathlib import Path

import pytest

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.tasks import hub, load_task
from embinit.tasks.load import data_origin
from helpers.hub_cache import snapshot
from helpers.iwslt import iwslt_release

OLD, NEW = "a1" * 20, "b2" * 20   # the commits: OLD tagged v1, NEW the repository's main
IWSLT_ZIP = "data/2017-01-trnted/texts/de/en/de-en.zip"
IWSLT_NAME = "IWSLT/iwslt2017/iwslt2017-de-en"
LOAD_DATASET = hub._load_dataset   # the real one (the fixtures replace it)


def two_snapshots(cache: Path, repo_id: str, old: dict[str, bytes], new: dict[str, bytes]) -> None:
    """A hub cache holding two snapshots of dataset repository `repo_id`: `old` at OLD (tag v1) and `new`
    at NEW (refs/main)."""
    snapshot(cache, repo_id, OLD, old, ref="v1")
    snapshot(cache, repo_id, NEW, new, ref="main")


def _release_zip(folder: Path, word: str) -> bytes:
    """The de-en release archive with `word` where the English test sentences say "Sentence"."""
    release = iwslt_release(folder)
    for path in release.glob("*.en.xml"):
        path.write_text(path.read_text(encoding="utf-8").replace("Sentence", word), encoding="utf-8")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path in sorted(release.iterdir()):
            z.write(path, f"de-en/{path.name}")
    return buf.getvalue()


@pytest.fixture
def offline(monkeypatch, tmp_path) -> Path:
    """HF_HUB_OFFLINE (for embinit and huggingface_hub, which reads it at import), the hub cache in
    tmp_path/hub, embinit's cache in tmp_path/cache, no data folder; `datasets` must not be asked."""
    import huggingface_hub.constants
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBINIT_DATA_DIR", raising=False)
    monkeypatch.setattr(hub, "_load_dataset", lambda p, c, **k: pytest.fail(f"datasets asked for {p}"))
    return tmp_path / "hub"


@pytest.fixture
def iwslt_hub(offline, tmp_path) -> Path:
    """IWSLT2017's repository with two release zips: v1 (OLD) says "Old", main (NEW) says "New"."""
    two_snapshots(offline, "IWSLT/iwslt2017", {IWSLT_ZIP: _release_zip(tmp_path / "old", "Old")},
                  {IWSLT_ZIP: _release_zip(tmp_path / "new", "New")})
    return offline


def _first_word(data) -> str:
    return data.references["test"][0].split()[0]


def test_iwslt_reads_the_snapshot_its_data_revision_pins(iwslt_hub, tmp_path):
    kw = {"tokenizer": "whitespace", "min_freq": 1, "cache_dir": tmp_path / "c", "lowercase": False}
    unpinned = load_task("iwslt2017", **kw)
    by_tag = load_task("iwslt2017", data_revision="v1", **kw)
    by_commit = load_task("iwslt2017", data_revision=OLD, **kw)
    assert (_first_word(unpinned), _first_word(by_tag), _first_word(by_commit)) == ("New", "Old", "Old")
    # embinit's task cache keys an entry by the commit read: the tag and the commit share one, main has its own
    assert [d.info["cache"] for d in (unpinned, by_tag, by_commit)] == ["miss", "miss", "hit"]
    assert by_tag.info["loaded_from"] == f"hub:{IWSLT_NAME}@v1"
    assert load_task("iwslt2017", **kw).info["cache"] == "hit" and _first_word(load_task("iwslt2017", **kw)) == "New"
    # the run's data source names the commit read, and a pin that is no commit beside it
    assert data_origin("iwslt2017", None) == f"hub:{IWSLT_NAME}@{NEW}"
    assert data_origin("iwslt2017", None, "v1") == f"hub:{IWSLT_NAME}@{OLD} (pinned: v1)"
    assert data_origin("iwslt2017", None, OLD) == f"hub:{IWSLT_NAME}@{OLD}"
    assert data_origin("iwslt2017", None, "v9") == f"hub:{IWSLT_NAME}@unknown (not in the hub cache) (pinned: v9)"


def test_a_pin_is_read_from_the_hub_even_where_a_data_folder_is_set_up(iwslt_hub, tmp_path, monkeypatch):
    """$EMBINIT_DATA_DIR/<task> is where an unpinned task reads; a pinned one reads the hub's snapshot."""
    iwslt_release(tmp_path / "data" / "iwslt2017")
    monkeypatch.setenv("EMBINIT_DATA_DIR", str(tmp_path / "data"))
    kw = {"tokenizer": "whitespace", "min_freq": 1, "cache_dir": False, "lowercase": False}
    assert _first_word(load_task("iwslt2017", **kw)) == "Sentence"
    assert _first_word(load_task("iwslt2017", data_revision="v1", **kw)) == "Old"
    assert data_origin("iwslt2017", None, "v1") == f"hub:{IWSLT_NAME}@{OLD} (pinned: v1)"
    with pytest.raises(EmbinitError, match="data_revision 'v1' pins the hub dataset, but data_dir"):
        load_task("iwslt2017", data_dir=tmp_path / "data" / "iwslt2017", data_revision="v1", **kw)


def test_offline_a_pin_the_cache_lacks_names_what_it_holds(iwslt_hub):
    held = f"which holds main = {NEW}; v1 = {OLD}"
    with pytest.raises(EmbinitError) as e:
        load_task("iwslt2017", tokenizer="whitespace", cache_dir=False, data_revision="v9")
    assert f"revision 'v9' of 'IWSLT/iwslt2017' is not in the Hugging Face cache {iwslt_hub}, {held}" in str(e.value)
    assert "HF_HUB_OFFLINE is set" in str(e.value)


def test_a_load_dataset_task_is_asked_for_the_pinned_revision(offline, tmp_path, monkeypatch):
    """sst2 comes through `datasets.load_dataset(path, config, revision=...)`; its task cache entry and data
    source follow the commit the pin names."""
    two_snapshots(offline, "nyu-mll/glue", {"sst2/train.parquet": b"old"}, {"sst2/train.parquet": b"new"})
    asked = []

    def fake(path, config, revision=None):
        asked.append((path, config, revision))
        word = {None: "new", "v1": "old", OLD: "old"}[revision]
        rows = [{"sentence": f"{word} film", "label": 1}, {"sentence": "dull", "label": 0}]
        return {"train": rows, "validation": rows}

    monkeypatch.setattr(hub, "_load_dataset", fake)
    kw = {"tokenizer": "whitespace", "min_freq": 1, "cache_dir": tmp_path / "c"}
    unpinned, pinned = load_task("sst2", **kw), load_task("sst2", data_revision="v1", **kw)
    assert asked == [("nyu-mll/glue", "sst2", None), ("nyu-mll/glue", "sst2", "v1")]
    assert "new" in unpinned.vocab.tokens and "old" not in unpinned.vocab.tokens
    assert "old" in pinned.vocab.tokens and "new" not in pinned.vocab.tokens
    assert load_task("sst2", data_revision=OLD, **kw).info["cache"] == "hit" and len(asked) == 2
    assert data_origin("sst2", None, "v1") == f"hub:nyu-mll/glue/sst2@{OLD} (pinned: v1)"


def test_offline_a_datasets_build_of_another_commit_is_refused(offline, monkeypatch, tmp_path):
    """Offline, `datasets` ignores `revision` and reads the latest build its cache holds (a folder named by
    the commit it was built from): a build of another commit than the pinned one is an error, not data
    the run's data source would name as the pinned commit's."""
    datasets = pytest.importorskip("datasets")
    two_snapshots(offline, "nyu-mll/glue", {"sst2/train.parquet": b"old"}, {"sst2/train.parquet": b"new"})

    class Split:   # what `datasets` returns offline: a split whose arrow file lies in its build's folder
        def __init__(self, commit):
            self.cache_files = [{"filename": str(tmp_path / "nyu-mll___glue" / "sst2" / "0.0.0" / commit / "t.arrow")}]

    built = {"commit": NEW}
    monkeypatch.setattr(datasets, "load_dataset", lambda path, config, **kw: {"train": Split(built["commit"])})
    with pytest.raises(EmbinitError, match=f"nyu-mll/glue@v1: offline, `datasets` ignores the revision and read its "
                                           f"cached build of {NEW}, not the pinned commit {OLD}"):
        LOAD_DATASET("nyu-mll/glue", "sst2", revision="v1")
    assert LOAD_DATASET("nyu-mll/glue", "sst2")["train"].cache_files   # unpinned: main's build, as before
    built["commit"] = OLD
    assert LOAD_DATASET("nyu-mll/glue", "sst2", revision="v1")["train"].cache_files
    assert LOAD_DATASET("nyu-mll/glue", "sst2", revision=OLD)["train"].cache_files


# Keys computed on main before data_revision existed (CODE_VERSION 2): a config without it keeps its key.
KEYS_BEFORE = {("multi30k", 0): "4de251b2b1db3c51", ("iwslt2017", 1): "f5f93fa4ab98629c",
               ("wikitext2", 0): "015d20f4d2f45780"}


def test_the_key_holds_a_pin_only_where_one_is_set(version_of_the_pins):
    for (task, seed), key in KEYS_BEFORE.items():
        assert TrialConfig(task, seed=seed).key() == key
        assert "data_revision" not in TrialConfig(task, seed=seed).key_fields()
    keys = {TrialConfig("iwslt2017", seed=1, data_revision=r).key() for r in (None, "v1", OLD, "main")}
    assert len(keys) == 4   # as written, as a model's pin is: a tag and its commit are two keys


def _spec(*tasks, **top) -> dict:
    return {"name": "pins", "tasks": list(tasks), "inits": ["xavier"], "seeds": 1, **top}


def test_the_spec_check_names_every_pin_that_cannot_apply(tmp_path):
    from embinit.spec.full_check import spec_problems
    own = {"like": "sst2", "files": {"train": "train.csv", "dev": "dev.csv"}, "columns": ["text", "label"]}
    (tmp_path / "sst2").mkdir()
    spec = _spec({"task": "sst2", "data_dir": str(tmp_path / "sst2"), "data_revision": "v1"},
                 {"task": "synthetic_lm", "data_revision": "v1"}, {"task": "mine", "data_revision": "v1"},
                 {"task": "multi30k", "data_revision": ""}, {"task": "wikitext2", "data_revision": "../refs"},
                 define_tasks={"mine": own})
    problems = dict(spec_problems(spec)[1])
    assert "reads its data folder" in problems["tasks[0].data_revision"]
    assert str(tmp_path / "sst2") in problems["tasks[0].data_revision"]
    assert "'synthetic_lm' is generated, not read from the hub" in problems["tasks[1].data_revision"]
    assert "'mine' has no copy on the hub" in problems["tasks[2].data_revision"]
    assert "a revision names a commit, a tag or a branch" in problems["tasks[3].data_revision"]
    assert "'../refs' is not a revision" in problems["tasks[4].data_revision"]
    # the spec's data_dir root: each task reads its folder there, not the hub
    problems = dict(spec_problems(_spec({"task": "mnli", "data_revision": "v1"}, data_dir=str(tmp_path)))[1])
    assert "reads its data folder" in problems["tasks[0].data_revision"]
    assert str(tmp_path / "mnli") in problems["tasks[0].data_revision"]


def test_offline_the_spec_check_refuses_a_pin_the_hub_cache_lacks(iwslt_hub):
    from embinit.spec.full_check import spec_problems
    held = f"which holds main = {NEW}; v1 = {OLD}"
    problems = spec_problems(_spec({"task": "iwslt2017", "data_revision": "v9"}))[1]
    assert problems == [("tasks[0].data_revision",
                         f"revision 'v9' of 'IWSLT/iwslt2017' is not in the Hugging Face cache {iwslt_hub}, {held}; "
                         f"HF_HUB_OFFLINE is set, so the hub is not asked")]
    short = dict(spec_problems(_spec({"task": "iwslt2017", "data_revision": OLD[:7]}))[1])
    assert f"did you mean IWSLT/iwslt2017@{OLD}?" in short["tasks[0].data_revision"]
    assert spec_problems(_spec({"task": "iwslt2017", "data_revision": "v1"}))[1] == []
    assert spec_problems(_spec({"task": "iwslt2017", "data_revision": OLD}))[1] == []


def test_offline_the_spec_check_refuses_an_unpinned_hub_dataset_no_cache_holds(offline, tmp_path, monkeypatch):
    """A task read from the hub without a pin: offline, with neither cache holding the dataset, every trial
    would fail, so the check (of a valid spec and of one with other problems) names it beside them."""
    from embinit.spec.full_check import spec_problems
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    spec = _spec({"task": "sst2"}, {"task": "synthetic_lm"})
    why = ("sst2: no local data (no --data-dir given and $EMBINIT_DATA_DIR not set) and the Hugging Face "
           "dataset 'nyu-mll/glue/sst2' could not be loaded (HF_HUB_OFFLINE is set, and it is not in the local "
           "cache)")
    problems = spec_problems(spec)[1]
    assert [where for where, _ in problems] == ["tasks[0]"] and problems[0][1].startswith(why)
    assert "needs: train.tsv, dev.tsv" in problems[0][1]
    broken = dict(spec_problems({**spec, "pretrained": {"glove": "${EMBINIT_UNSET_VAR}/v.txt"}})[1])
    assert broken["tasks[0]"].startswith(why) and "pretrained.glove" in broken
    (offline / "datasets--nyu-mll--glue").mkdir(parents=True)   # a cached copy: the trials read it
    assert spec_problems(spec)[1] == []
    (offline / "datasets--nyu-mll--glue").rmdir()
    monkeypatch.delenv("HF_HUB_OFFLINE")   # online: the trials fetch it
    assert spec_problems(spec)[1] == []


def test_train_takes_data_revision(iwslt_hub, tmp_path, capsys):
    import json

    from embinit.cli import main
    base = ["train", "--task", "iwslt2017", "--tokenizer", "whitespace", "--epochs", "1", "--threads", "1",
            "--d-model", "16", "--heads", "2", "--layers", "1", "--ff-dim", "16", "--max-len", "16", "--quiet",
            "--cache-dir", str(tmp_path / "c")]
    assert main([*base, "--data-revision", "v1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["config"]["data_revision"] == "v1"
    cfg = TrialConfig.from_dict(result["config"])
    assert cfg.key() == result["key"] != dataclasses.replace(cfg, data_revision=None).key()
    assert result["info"]["data"]["loaded_from"] == f"hub:{IWSLT_NAME}@v1"
    assert main([*base, "--data-revision", "v9"]) == 2
    err = capsys.readouterr().err
    assert "--data-revision: revision 'v9' of 'IWSLT/iwslt2017' is not in the Hugging Face cache" in err
    assert main([*base, "--data-revision", "v1", "--data-dir", str(tmp_path)]) == 2
    assert "--data-revision: data_revision 'v1' pins iwslt2017's hub dataset, but the task reads its data folder" \
        in capsys.readouterr().err


def test_a_spec_without_a_pin_keeps_its_hash_and_a_pinned_one_records_it():
    """A sweep is known by its spec's hash (the parent run's `embinit.spec_hash`): a task entry's unset
    data_revision is left out of the canonical spec, as other fields added later are."""
    from embinit.spec import load_spec
    spec = {"name": "h", "tasks": ["sst2", {"task": "multi30k", "epochs": 2}], "inits": ["xavier"], "seeds": 2}
    assert load_spec(spec).spec_hash() == "38215d6f667d6226"   # computed on main, before data_revision
    pinned = load_spec({**spec, "tasks": [{"task": "sst2", "data_revision": "v1"}, spec["tasks"][1]]})
    assert [t.get("data_revision") for t in pinned.canonical()["tasks"]] == ["v1", None]
    assert "data_revision" not in pinned.canonical()["tasks"][1]
    assert [p.config["data_revision"] for p in pinned.plan()] == ["v1", "v1", None, None]


def test_the_service_takes_a_pin_and_refuses_one_that_cannot_apply(iwslt_hub, tmp_path):
    """A submitted spec's data_revision reaches its trials (no path confinement touches it); a malformed
    revision or, offline, one the API's hub cache lacks is a 422 naming the task entry's field."""
    from fastapi import HTTPException

    from service.settings import Settings
    from service.specs import prepare
    settings = Settings(data_roots=[tmp_path], pretrained_roots=[tmp_path], tracking_uri=f"sqlite:///{tmp_path}/m.db")
    spec = _spec({"task": "iwslt2017", "data_revision": "v1"}, "sst2")
    (iwslt_hub / "datasets--nyu-mll--glue").mkdir()   # offline, an unpinned hub dataset must be cached
    sub = prepare(spec, settings, settings.tracking_uri)
    assert [p.config["data_revision"] for p in sub.plan] == ["v1", None]
    assert sub.trial_keys[0] == TrialConfig.from_dict(sub.plan[0].config).key() != \
        TrialConfig.from_dict({**sub.plan[0].config, "data_revision": None}).key()
    for revision, message in (("../../etc", "'../../etc' is not a revision"),
                              ("v9", "revision 'v9' of 'IWSLT/iwslt2017' is not in the Hugging Face cache")):
        with pytest.raises(HTTPException) as e:
            prepare(_spec({"task": "iwslt2017", "data_revision": revision}), settings, settings.tracking_uri)
        assert e.value.status_code == 422
        assert [p["loc"] for p in e.value.detail if message in p["msg"]] == ["tasks[0].data_revision"], e.value.detail


def test_the_dry_run_notes_a_hub_dataset_not_pinned_to_a_commit(iwslt_hub):
    """As for a hub model: a key names a tag, a branch or nothing, not the snapshot; the note gives the
    commit the hub cache would serve now. A commit pin, a generated task and a data folder get no note."""
    from embinit.cli.hub_notes import hub_notes
    from embinit.spec import load_spec

    def notes(*tasks):
        return [n for n in hub_notes(load_spec(_spec(*tasks)).plan()) if "hub dataset" in n]
    assert notes({"task": "iwslt2017", "data_revision": "v1"}) == [
        f"note: iwslt2017 reads its hub dataset and data_revision 'v1' is a tag or branch: its trials' keys do not "
        f"name the snapshot, which can change with the hub; it reads IWSLT/iwslt2017@{OLD} here now: "
        f"data_revision: {OLD} keeps it"]
    assert notes("iwslt2017") == [
        f"note: iwslt2017 reads its hub dataset and no data_revision pins it: its trials' keys do not name the "
        f"snapshot, which can change with the hub; it reads IWSLT/iwslt2017@{NEW} here now: data_revision: {NEW} "
        f"keeps it"]
    assert notes({"task": "iwslt2017", "data_revision": OLD}, "synthetic_lm") == []
