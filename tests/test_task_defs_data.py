"""Tasks defined in a spec, the parts tests/test_task_defs.py leaves out: labels left out (the train file's,
sorted, recorded with the data), labels written as YAML integers, a JSON Lines language-model corpus, and
each problem of a definition as its own entry of the spec's one error (and of the service's 422)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.spec.loading import load_spec
from embinit.spec.problems import SpecError
from embinit.task_registry import DEFINED, unregister
from embinit.tasks.load import check_files, load_task

from test_task_defs import IMDB, REVIEWS, spec, write_csv


@pytest.fixture(autouse=True)
def _forget_definitions():
    yield
    for name in list(DEFINED):
        unregister(name)


def unlabelled(**more) -> dict:
    return {k: v for k, v in {**IMDB, **more}.items() if k != "labels"}


# ---- labels left out ----------------------------------------------------------------------------------

def test_labels_left_out_are_the_train_files_values_sorted_and_said_with_the_data(tmp_path):
    write_csv(tmp_path / "train.csv", REVIEWS * 3)
    write_csv(tmp_path / "dev.csv", REVIEWS)
    TrialConfig(task="imdb", task_def=unlabelled())
    data = load_task("imdb", tmp_path, tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.info["label_names"] == ["negative", "positive"]
    assert data.info["labels_from"] == "train.csv (its label values, sorted)"
    assert [row[-1] for row in data.splits["dev"]] == [1, 0, 1, 0]
    write_csv(tmp_path / "dev.csv", [("so-so", "neutral")])
    with pytest.raises(EmbinitError, match=r"dev.csv:2: unknown label 'neutral'; valid labels: "
                                           r"\['negative', 'positive'\]"):
        check_files("imdb", tmp_path)
    write_csv(tmp_path / "train.csv", [("fine", "positive"), ("good", "positive")])
    with pytest.raises(EmbinitError, match=r"train.csv: the label column 'sentiment' holds \['positive'\]; a "
                                           r"classifier needs 2 labels at least \(or give the definition's labels\)"):
        check_files("imdb", tmp_path)


def test_labels_written_otherwise_are_one_problem_each_with_the_files_own_labels(tmp_path):
    """Labels given as [negative, positive] over files that write pos/neg: each value is one problem (its
    first row, how many more and where), and the error names the labels the file holds, instead of one
    line per row (SST-2's train file: 29,780 lines of "unknown label 'neg'", ten of them shown)."""
    rows = [("good", "pos"), ("bad", "neg"), ("fine", "positive")] * 7 + [("meh", "neg")]
    write_csv(tmp_path / "train.csv", rows)
    write_csv(tmp_path / "dev.csv", REVIEWS)
    TrialConfig(task="imdb", task_def=IMDB)
    with pytest.raises(EmbinitError) as e:
        check_files("imdb", tmp_path)
    valid = "valid labels: ['negative', 'positive']"
    assert str(e.value) == (
        f"{tmp_path / 'train.csv'}: 2 problems: "
        f"{tmp_path / 'train.csv'}:2: unknown label 'pos'; {valid} (the same on 6 more lines: 5, 8, 11, 14, 17, ...)"
        f" | {tmp_path / 'train.csv'}:3: unknown label 'neg'; {valid} (the same on 7 more lines: 6, 9, 12, 15, "
        f"18, ...); the labels this file holds: ['neg', 'pos', 'positive']")


def test_integer_labels_left_out_sort_as_numbers_and_yaml_integers_read_as_written(tmp_path):
    rows = [{"text": f"row {i}", "y": i % 11} for i in range(33)]
    for name in ("train.jsonl", "dev.jsonl"):
        (tmp_path / name).write_text("\n".join(json.dumps(r) for r in rows))
    files = {"train": "train.jsonl", "dev": "dev.jsonl"}
    TrialConfig(task="scale", task_def=unlabelled(files=files, columns=["text", "y"]))
    data = load_task("scale", tmp_path, tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.info["label_names"] == [str(i) for i in range(11)]          # 0 .. 10, not 0, 1, 10, 2
    assert [row[-1] for row in data.splits["train"][:12]] == [*range(11), 0]
    written = {**IMDB, "files": files, "columns": ["text", "y"], "labels": list(range(11))}
    assert TrialConfig(task="scale", task_def=written).key() == \
        TrialConfig(task="scale", task_def={**written, "labels": [str(i) for i in range(11)]}).key()
    assert TrialConfig(task="scale", task_def=unlabelled(files=files, columns=["text", "y"])).key() != \
        TrialConfig(task="scale", task_def=written).key()


# ---- a JSON Lines language-model corpus ---------------------------------------------------------------

LM = {"like": "wikitext2", "files": {"train": "train.jsonl", "valid": "valid.jsonl", "test": "test.jsonl"},
      "min_freq": 1}


def test_a_jsonl_lm_corpus_reads_the_stream_a_text_file_would(tmp_path):
    docs = [{"text": "the cat sat\nthe dog ran", "id": 1}, {"text": "", "id": 2}, {"text": "a bird", "id": 3}]
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
        (tmp_path / f"{split}.txt").write_text("the cat sat\nthe dog ran\n\na bird\n")
    TrialConfig(task="lm_jsonl", task_def=LM)
    TrialConfig(task="lm_text", task_def={**LM, "files": {s: f"{s}.txt" for s in ("train", "valid", "test")}})
    as_jsonl = load_task("lm_jsonl", tmp_path, tokenizer="whitespace", cache_dir=False)
    as_text = load_task("lm_text", tmp_path, tokenizer="whitespace", cache_dir=False)
    assert as_jsonl.splits["train"] == as_text.splits["train"] and len(as_jsonl.splits["train"]) == 12

    (tmp_path / "body.jsonl").write_text('{"body": "x y"}\n')
    TrialConfig(task="lm_body", task_def={**LM, "columns": ["body"], "files": {s: "body.jsonl" for s in LM["files"]}})
    body = load_task("lm_body", tmp_path, tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert [body.vocab.tokens[i] for i in body.splits["train"]] == ["x", "y", "<eos>"]
    (tmp_path / "valid.jsonl").write_text('{"text": "ok"}\n[1]\n{"txt": "typo"}\n{"text": 7}\nnot json\n')
    with pytest.raises(EmbinitError) as e:
        check_files("lm_jsonl", tmp_path)
    text = str(e.value)
    assert "valid.jsonl: 4 problems" in text and "valid.jsonl:2: not a JSON object, but list" in text
    assert "valid.jsonl:3: ['text'] is missing or not text" in text and "valid.jsonl:4: ['text'] is" in text
    assert "valid.jsonl:5: not JSON" in text


def test_the_format_a_definition_says_or_its_files_suffixes_say(tmp_path):
    bad = {
        "a": {**IMDB, "files": {"train": "train.csv", "dev": "dev.tsv"}},               # two formats, none given
        "b": {**IMDB, "files": {"train": "train.txt", "dev": "dev.txt"}},               # no format of the kind
        "c": {**LM, "format": "csv"},
        "d": {**LM, "files": {s: f"{s}.txt" for s in ("train", "valid", "test")}, "columns": ["text"]},
        "e": {"like": "multi30k", "files": {"train": "train", "val": "val"}, "format": "jsonl",
              "columns": ["fr", "en"]},
        "f": {**IMDB, "labels": ["x", "x"], "label_names": ["one"]},
        "g": unlabelled(label_names=["neg", "pos"]),
    }
    with pytest.raises(SpecError) as e:
        load_spec(spec(bad, ["sst2"]))
    found = dict(e.value.problems)
    assert "the files end in ['csv', 'tsv']: one format for all" in found["define_tasks.a.format"]
    assert "do not all end in one of ['.csv', '.tsv', '.jsonl']" in found["define_tasks.b.format"]
    assert found["define_tasks.c.format"] == "'csv'; one of ['text', 'jsonl']"
    assert found["define_tasks.d.columns"].startswith("a JSONL corpus's text key, one (default ['text'])")
    assert found["define_tasks.e.format"] == "translation files are read as <stem>.<language>; no format"
    assert found["define_tasks.e.columns"] == "classification and JSONL language-model corpora only"
    assert "at least 2, distinct" in found["define_tasks.f.labels"]
    assert found["define_tasks.f.label_names"] == "one distinct name per label of `labels`"
    # names without `labels` (review M7): the message named a `labels` the user never gave
    assert found["define_tasks.g.label_names"].startswith("needs `labels` written out beside it: the label values")
    assert 'labels: ["0", "1"] with label_names: [neg, pos]' in found["define_tasks.g.label_names"]
    ok = load_spec(spec({"own": {**IMDB, "files": {"train": "train.tsv", "dev": "dev.tsv"}}}, ["sst2"]))
    assert ok.define_tasks["own"]["files"]["dev"] == "dev.tsv"


# ---- one error, one entry per problem ------------------------------------------------------------------

def test_each_problem_of_a_definition_is_its_own_entry_beside_the_specs_other_problems():
    definitions = {"imdb": {**IMDB, "files": {"train": "train.csv"}, "columns": ["review"], "epochs": 0},
                   "sst2": {"like": "sst3"}}
    with pytest.raises(SpecError) as e:
        load_spec(spec(definitions, ["imdb", "nope"], inits=["xavir"]))
    assert [p for p, _ in e.value.problems] == [
        "define_tasks.imdb.files", "define_tasks.imdb.columns", "define_tasks.imdb.epochs", "define_tasks.sst2",
        "define_tasks.sst2.like", "tasks[1].task", "inits[0]"]
    assert dict(e.value.problems)["define_tasks.sst2.like"].endswith("did you mean 'sst2'?")
    assert str(e.value).startswith("invalid experiment spec (7 problems): define_tasks.imdb.files: the split 'dev' "
                                   "is needed: 'sst2' reports ['best/val/acc'] from its evaluation splits ['dev']; ")


def test_a_defined_task_trains_and_its_record_says_its_labels(tmp_path):
    """The labels a trial's classifier's outputs stand for reach its result (and the run's `embinit.labels`
    tag, tracking/trial_run.py), so a task defined without them says which id is which."""
    from embinit.train.trial import run_trial
    write_csv(tmp_path / "train.csv", REVIEWS * 4)
    write_csv(tmp_path / "dev.csv", REVIEWS)
    config = TrialConfig(task="imdb", task_def={**unlabelled(), "epochs": 1}, data_dir=str(tmp_path),
                         tokenizer="whitespace", threads=1)
    result = run_trial(config, cache_dir=False)
    assert result.status == "finished"
    assert result.info["data"]["label_names"] == ["negative", "positive"]
    assert result.info["data"]["labels_from"] == "train.csv (its label values, sorted)"


def test_problems_of_a_definition_through_the_api_each_at_its_path(tmp_path):
    from fastapi.testclient import TestClient
    from service.fakes import FakeCluster
    from service.settings import Settings
    from helpers.service import app_clients
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        data_roots=[tmp_path], pretrained_roots=[tmp_path], refresh_interval_s=0.0)
    with app_clients(FakeCluster()) as open_client:
        client: TestClient = open_client(settings)
        r = client.post("/experiments", json=spec({"imdb": {**IMDB, "format": "xml", "colour": 1}},
                                                  [{"task": "imdb", "data_dir": str(tmp_path)}]))
    assert r.status_code == 422
    detail = {p["loc"]: p["msg"] for p in r.json()["detail"]}
    assert detail["define_tasks.imdb.format"] == "'xml'; one of ['csv', 'tsv', 'jsonl']"
    assert detail["define_tasks.imdb.colour"].startswith("unknown field; valid: ['like', 'description', 'files'")


def test_the_readmes_example_is_a_valid_spec():
    import re
    import yaml
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if b.startswith("define_tasks:")]
    parsed = load_spec({"name": "readme", "inits": ["xavier"], **yaml.safe_load(block)})
    assert sorted(parsed.define_tasks) == ["fr_en", "imdb", "news_lm"]
    assert {c.task for c in parsed.expand()} == {"fr_en", "imdb", "news_lm"}


def test_a_translation_file_given_with_its_language_suffix_is_a_problem():
    fr_en = {"like": "multi30k", "languages": ["fr", "en"], "files": {"train": "train.fr", "val": "dev.en",
                                                                       "test": "test"}}
    with pytest.raises(SpecError) as e:
        load_spec(spec({"fr_en": fr_en}, ["sst2"]))
    read_as = "read as <stem>.fr and <stem>.en"
    assert dict(e.value.problems) == {
        "define_tasks.fr_en.files.train": f"'train.fr' ends in .fr: give the stem 'train', {read_as}",
        "define_tasks.fr_en.files.val": f"'dev.en' ends in .en: give the stem 'dev', {read_as}"}
    load_spec(spec({"news": {**fr_en, "files": {"train": "news.2019", "val": "dev", "test": "test"}}}, ["sst2"]))


def test_the_report_groups_seeds_of_one_definition_whatever_its_description_and_parts_other_definitions():
    """Seeds of one definition run by two sweeps whose spec only renamed its description share a key space
    and a row; a definition with other labels is another setting, its own row."""
    from embinit.report.rows import group
    from embinit.tracking.records import TrialRecord

    def record(seed, **d):
        config = TrialConfig(task="imdb", seed=seed, task_def={**IMDB, **d}).to_dict()
        return TrialRecord(f"run{seed}{len(d)}", f"key{seed}{len(d)}", "imdb", "Xavier", "finished", config,
                           metrics={"best/val/acc": 0.5}, seed=seed)
    same = [record(0, description="IMDB"), record(1, description="IMDB reviews")]
    assert [len(members) for members in group(same).values()] == [2]
    parted = group([*same, record(2, labels=["positive", "negative"])])
    assert sorted(len(members) for members in parted.values()) == [1, 2]
    assert all('"task_def"' in k[-1] for k in parted)   # the rows say which setting tells them apart


def test_a_definitions_defaults_have_the_bounds_of_a_specs_own_values(tmp_path):
    """Each override is bounded as the same value set in `defaults` (embinit.bounds); the service caps a
    definition's too, though its trials' configs leave them unset (the task's defaults)."""
    with pytest.raises(SpecError) as e:
        load_spec(spec({"imdb": {**IMDB, "dropout": 1.5, "max_len": 10**7, "lr": 50.0, "heads": 0}}, ["sst2"]))
    assert dict(e.value.problems) == {
        "define_tasks.imdb.dropout": "dropout must be < 1 (a probability; 1 would drop everything), got 1.5",
        "define_tasks.imdb.max_len": "max_len must be <= 1000000 (about 1 GB of memory per 10^6 positions), "
                                     "got 10000000",
        "define_tasks.imdb.lr": "lr must be <= 10 (beyond it training diverges at once), got 50",
        "define_tasks.imdb.heads": "heads must be >= 1, got 0"}
    from service.fakes import FakeCluster
    from service.settings import Settings
    from helpers.service import app_clients
    write_csv(tmp_path / "train.csv", REVIEWS)
    write_csv(tmp_path / "dev.csv", REVIEWS)
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        data_roots=[tmp_path], pretrained_roots=[tmp_path], refresh_interval_s=0.0)
    with app_clients(FakeCluster()) as open_client:
        r = open_client(settings).post("/experiments", json=spec(
            {"imdb": {**IMDB, "epochs": 5000, "d_model": 8192}}, [{"task": "imdb", "data_dir": str(tmp_path)}]))
    assert r.status_code == 422, r.text
    assert {p["loc"]: p["msg"] for p in r.json()["detail"]} == {
        "define_tasks.imdb.epochs": "5000 exceeds this service's limit of 1000 (setting max_epochs)",
        "define_tasks.imdb.d_model": "8192 exceeds this service's limit of 4096 (setting max_d_model)"}


def test_a_definition_with_problems_says_its_data_files_wait_for_it(tmp_path):
    """The spec check reads a defined task's files only through a valid definition: with problems in it,
    the check says so beside them (it said that model sizes and cross-field checks wait, and not this)."""
    from embinit.spec.full_check import check_spec
    folder = tmp_path / "imdb"
    folder.mkdir()
    write_csv(folder / "train.csv", REVIEWS)
    write_csv(folder / "dev.csv", REVIEWS, header=("text", "sentiment"))   # lacks the column `review`
    data = spec({"imdb": {**IMDB, "colour": 1}}, [{"task": "imdb", "data_dir": str(folder)}])
    with pytest.raises(SpecError) as e:
        check_spec(data)
    assert list(dict(e.value.problems)) == ["define_tasks.imdb.colour"]
    assert "data files of the tasks defined with problems above (imdb) not checked until the definitions are " \
           "fixed" in e.value.notes
    data["define_tasks"]["imdb"].pop("colour")
    with pytest.raises(SpecError) as e:
        check_spec(data)
    assert "header lacks column(s) ['review']" in dict(e.value.problems)["tasks[0].data_dir"]
