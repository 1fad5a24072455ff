"""Tasks defined in a spec (embinit.task_defs, `define_tasks:`): a researcher's own CSV, JSONL or TSV
classification data, or a parallel corpus of another language pair, as a task of a built-in kind, with
no code. The spec check lists every problem of a definition; the files' readers name each bad row; the
definition is in the trial key (not its description) and in the data cache's identity; trials train on
it, in a Ray worker too, and `embinit report` in a later process reads its rows from MLflow alone."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.spec.loading import load_spec
from embinit.spec.problems import SpecError
from embinit.task_registry import DEFINED, TASKS, unregister
from embinit.tasks import labelled
from embinit.tasks.load import check_files, load_task

TINY = {"epochs": 2, "layers": 1, "d_model": 16, "heads": 2, "ff_dim": 32, "batch_size": 8, "min_freq": 1,
        "max_len": 32}
IMDB = {"like": "sst2", "files": {"train": "train.csv", "dev": "dev.csv"}, "columns": ["review", "sentiment"],
        "labels": ["negative", "positive"], **TINY}
REVIEWS = [("a great film, truly \"great\"", "positive"), ("awful,\nboring movie", "negative"),
           ("loved every minute", "positive"), ("a waste of time", "negative")]


@pytest.fixture(autouse=True)
def _forget_definitions():
    yield
    for name in list(DEFINED):
        unregister(name)


def write_csv(path: Path, rows, header=("review", "sentiment")) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def imdb_folder(tmp_path: Path, n: int = 24) -> Path:
    folder = tmp_path / "imdb"
    folder.mkdir()
    write_csv(folder / "train.csv", (REVIEWS * n)[:n])
    write_csv(folder / "dev.csv", REVIEWS * 2)
    return folder


def spec(definitions: dict, tasks: list, **more) -> dict:
    return {"name": "own-data", "define_tasks": definitions, "tasks": tasks, "inits": ["xavier"], "seeds": [0],
            **more}


# ---- the spec check ------------------------------------------------------------------------------------

def test_every_problem_of_every_definition_in_one_error():
    bad = {
        "sst2": {**IMDB},                                                     # shadows a built-in task
        "a": {"like": "nope", "files": {"train": "t.csv"}},                   # no such task
        "b": {**IMDB, "files": {"train": "x/train.csv", "test": "t.csv"}, "colour": 1},
        "c": {**IMDB, "format": "xml", "columns": ["only"], "labels": ["one"]},
        "d": {"like": "multi30k", "files": {"train": "train", "val": "val", "test": "test"},
              "languages": ["fr"], "labels": ["x", "y"]},
        "e": {**IMDB, "lr": -1, "epochs": 2.5},
    }
    with pytest.raises(SpecError) as e:
        load_spec(spec(bad, ["sst2"]))
    text = str(e.value)
    for needed in ("define_tasks.sst2: 'sst2' is a built-in task",
                   "define_tasks.a.like: 'nope' is not a built-in task with files",
                   "define_tasks.b.colour: unknown field",
                   "define_tasks.b.files.test: classification task 'sst2' has no split 'test'",
                   "define_tasks.b.files: the split 'dev' is needed",
                   "define_tasks.b.files.train: 'x/train.csv' must be a file name in data_dir, not a path",
                   "define_tasks.c.format: 'xml'", "define_tasks.c.columns:", "define_tasks.c.labels:",
                   "define_tasks.d.languages: [source, target]", "define_tasks.d.labels: classification only",
                   "define_tasks.e.lr: lr must be >= 1e-08, got -1",
                   "define_tasks.e.epochs: 2.5 is not a valid epochs"):
        assert needed in text, (needed, text)
    assert not DEFINED & set(bad)   # nothing registered from a spec refused


def test_a_definition_gives_every_split_its_reported_metrics_come_from():
    """The report reads a task's metrics by its like-task's names: `test/bleu` (multi30k), `best/val/acc_matched`
    and `best/val/acc_mismatched` (mnli). Without its test split a translation trial logs no `test/bleu`, and an
    MNLI-like classifier with one dev split names its accuracy `val/acc`, not `val/acc_matched` (one split has
    no suffix): every trial finished, yet each row read n = 0, none of them counted anywhere, and a search's
    selection metric (`val/acc_matched`) was NaN for every point. Such a definition is a problem, not a run."""
    nli = {"like": "mnli", "files": {"train": "train.csv", "dev_matched": "dev.csv"},
           "columns": ["premise", "hypothesis", "label"], "labels": ["entailment", "neutral", "contradiction"]}
    fr_en = {"like": "multi30k", "languages": ["fr", "en"], "files": {"train": "train", "val": "dev"}}
    with pytest.raises(SpecError) as e:
        load_spec(spec({"nli": nli, "fr_en": fr_en}, ["sst2"]))
    found = dict(e.value.problems)
    assert found["define_tasks.nli.files"].startswith("the split 'dev_mismatched' is needed")
    assert "best/val/acc_mismatched" in found["define_tasks.nli.files"]
    assert found["define_tasks.fr_en.files"].startswith("the split 'test' is needed")
    assert "test/bleu" in found["define_tasks.fr_en.files"]
    load_spec(spec({"nli": {**nli, "files": {**nli["files"], "dev_mismatched": "dev.csv"}}}, ["sst2"]))


def test_a_task_is_named_only_by_defining_it_in_the_same_spec(tmp_path):
    folder = imdb_folder(tmp_path)
    ok = load_spec(spec({"imdb": IMDB}, [{"task": "imdb", "data_dir": str(folder)}]))
    assert [c.task_def["columns"] for c in ok.expand()] == [["review", "sentiment"]]
    assert "imdb" in TASKS and "imdb" in DEFINED            # registered in this process by the first spec ...
    with pytest.raises(SpecError, match=r"'imdb' is not a registered task.*define it in define_tasks"):
        load_spec(spec({}, ["imdb"]))                        # ... which does not make it a built-in name
    with pytest.raises(SpecError, match=r"tasks\[0\]: a task entry has no 'definition'; define the task in"):
        load_spec(spec({}, [{"task": "mine", "definition": IMDB}]))   # the field the spec fills, not the user


# ---- reading the files ---------------------------------------------------------------------------------

def _layout(**d):
    from embinit import task_defs
    return task_defs.entry({**IMDB, **d}).layout


def test_csv_rows_with_quotes_commas_and_line_breaks_and_every_bad_row_named(tmp_path):
    good = write_csv(tmp_path / "good.csv", REVIEWS)
    assert labelled.read_csv(good, _layout()) == [
        ("a great film, truly \"great\"", 1), ("awful,\nboring movie", 0), ("loved every minute", 1),
        ("a waste of time", 0)]
    bad = tmp_path / "bad.csv"
    bad.write_text('review,sentiment\n"fine, fine",positive\nno label here\n"ok",meh\n\n"x",negative,extra\n')
    with pytest.raises(EmbinitError) as e:
        labelled.read_csv(bad, _layout())
    text = str(e.value)
    assert f"{bad}: 3 problems" in text
    assert f"{bad}:3: expected 2 fields as in the header, got 1" in text
    assert f"{bad}:4: unknown label 'meh'" in text and f"{bad}:6: expected 2 fields" in text
    with pytest.raises(EmbinitError, match=r"header lacks column\(s\) \['sentiment'\]"):
        labelled.read_csv(write_csv(tmp_path / "h.csv", REVIEWS, header=("review", "label")), _layout())


def test_jsonl_rows_and_every_bad_row_named(tmp_path):
    layout = _layout(files={"train": "train.jsonl", "dev": "dev.jsonl"}, columns=["premise", "hypothesis", "gold"],
                     labels=["0", "1", "2"])
    assert layout.format == "jsonl"
    good = tmp_path / "good.jsonl"
    good.write_text('{"premise": "a", "hypothesis": "b", "gold": 2}\n\n'
                    '{"premise": "c", "hypothesis": "d", "gold": "0"}\n'
                    '{"premise": "e", "hypothesis": "f", "gold": 1.0}\n')   # a float column written out
    assert labelled.read_jsonl(good, layout) == [("a", "b", 2), ("c", "d", 0), ("e", "f", 1)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"premise": "a", "hypothesis": "b", "gold": 1}\n[1, 2]\n{"premise": "a", "gold": 1}\n'
                   '{"premise": "a", "hypothesis": "b", "gold": 7}\n{"premise": \n')
    with pytest.raises(EmbinitError) as e:
        labelled.read_jsonl(bad, layout)
    text = str(e.value)
    assert f"{bad}: 4 problems" in text and f"{bad}:2: not a JSON object, but list" in text
    assert f"{bad}:3: ['hypothesis'] is missing or not text" in text
    assert f"{bad}:4: unknown label '7'" in text and f"{bad}:5: not JSON" in text


def test_the_preflight_check_reads_a_defined_tasks_files(tmp_path):
    folder = imdb_folder(tmp_path)
    load_spec(spec({"imdb": IMDB}, [{"task": "imdb", "data_dir": str(folder)}]))
    check_files("imdb", folder)
    write_csv(folder / "dev.csv", [("fine", "great")])
    with pytest.raises(EmbinitError, match=r"dev.csv:2: unknown label 'great'"):
        check_files("imdb", folder)
    (folder / "train.csv").unlink()
    with pytest.raises(EmbinitError, match="train.csv"):
        check_files("imdb", folder)


# ---- keys and the data cache --------------------------------------------------------------------------

def test_the_definition_is_in_the_key_but_not_its_description():
    def key(**d):
        return TrialConfig(task="imdb", task_def={**IMDB, **d}).key()
    base = key()
    assert key(description="IMDB reviews") == base
    assert key(columns=["text", "sentiment"]) != base
    assert key(labels=["positive", "negative"]) != base
    assert key(files={"train": "train.csv", "dev": "test.csv"}) != base
    assert key(format="csv") == base          # the suffix's format, written out
    assert key(epochs=3) != base
    assert TrialConfig(task="sst2").key_fields().get("task_def", "absent") == "absent"   # other keys unchanged


def test_a_redefined_task_does_not_read_the_data_cache_of_the_old_definition(tmp_path):
    """Same name, same files, the labels swapped: the cached tokenized data of the first definition would
    give the second one's trials the first one's label ids."""
    folder = imdb_folder(tmp_path)
    a = TrialConfig(task="imdb", task_def=IMDB)
    first = load_task("imdb", folder, min_freq=1, cache_dir=tmp_path / "cache")
    swapped = TrialConfig(task="imdb", task_def={**IMDB, "labels": ["positive", "negative"]})
    second = load_task("imdb", folder, min_freq=1, cache_dir=tmp_path / "cache")
    labels = [row[-1] for row in first.splits["train"]]
    assert [row[-1] for row in second.splits["train"]] == [1 - y for y in labels]
    assert a.key() != swapped.key()


# ---- training on it ------------------------------------------------------------------------------------

def fr_en_folder(tmp_path: Path) -> Path:
    """A tiny French->English parallel corpus: train/dev/test .fr and .en."""
    folder = tmp_path / "fr-en"
    folder.mkdir()
    words = [("chat", "cat"), ("chien", "dog"), ("maison", "house"), ("rouge", "red"), ("petit", "small")]
    for split, n in (("train", 40), ("dev", 10), ("test", 10)):
        pairs = [(f"le {a} {b2}", f"the {a_en} {b2_en}") for i in range(n)
                 for (a, a_en), (b2, b2_en) in [(words[i % 5], words[(i * 2 + 1) % 5])]]
        (folder / f"{split}.fr").write_text("\n".join(s for s, _ in pairs) + "\n")
        (folder / f"{split}.en").write_text("\n".join(t for _, t in pairs) + "\n")
    return folder


FR_EN = {"like": "multi30k", "languages": ["fr", "en"], "files": {"train": "train", "val": "dev", "test": "test"},
         **TINY, "heads": 2}
WORDS = [("chat", "cat"), ("chien", "dog"), ("maison", "house"), ("rouge", "red"), ("petit", "small")]


@pytest.mark.slow
def test_a_defined_translation_pair_a_jsonl_classification_and_an_lm_corpus_train(tmp_path):
    from embinit.train.trial import run_trial
    folder = fr_en_folder(tmp_path)
    result = run_trial(TrialConfig(task="fr_en", task_def=FR_EN, data_dir=str(folder), threads=1), cache_dir=False)
    assert result.status == "finished" and 0 <= result.test["test/bleu"] <= 100
    assert result.info["split_sizes"] == {"train": 40, "val": 10, "test": 10}
    data = load_task("fr_en", folder, min_freq=1, cache_dir=False)
    assert data.info["files"] == {"train": ["train.fr", "train.en"], "val": ["dev.fr", "dev.en"],
                                  "test": ["test.fr", "test.en"]}

    words = WORDS
    nli = tmp_path / "nli"
    nli.mkdir()
    rows = [{"p": f"a {w}", "h": f"no {w}" if i % 2 else f"a {w}", "y": i % 2} for i, (w, _) in enumerate(words * 6)]
    for name in ("train.jsonl", "dev.jsonl"):
        (nli / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    defined = {"like": "sst2", "files": {"train": "train.jsonl", "dev": "dev.jsonl"}, "columns": ["p", "h", "y"],
               "labels": ["0", "1"], "label_names": ["same", "negated"], **TINY}
    result = run_trial(TrialConfig(task="nli_own", task_def=defined, data_dir=str(nli), threads=1), cache_dir=False)
    assert result.status == "finished" and 0 <= result.best["val/acc"] <= 1

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, n in (("train", 60), ("valid", 10), ("test", 10)):
        lines = [f"the {a} saw the {b}" for (a, b), _ in zip(words * n, range(n))]
        (corpus / f"{split}.txt").write_text("\n".join(lines))
    lm = {"like": "wikitext2", "files": {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}, **TINY}
    result = run_trial(TrialConfig(task="lm_own", task_def=lm, data_dir=str(corpus), tokenizer="whitespace",
                                   threads=1), cache_dir=False)
    assert result.status == "finished" and result.test["test/ppl"] >= 1


# In a process that never saw the spec: the report, the reproduction document and the service's results.
LATER = """
import json, subprocess, sys
from types import SimpleNamespace
from service.experiment_runs import chosen_records
from service.store import ResultStore
uri, spec = sys.argv[1], json.loads(sys.argv[2])
keys = sorted(chosen_records(uri, spec["name"]))
exp = SimpleNamespace(id="e1", updated_at=0, status="succeeded", spec=spec, trial_keys=keys,
                      mlflow_experiment=spec["name"], tracking_uri=uri)
store = ResultStore(uri)
print(json.dumps({"report": json.loads(store.report(exp)["json"]), "trials": store.trials(exp)}, default=str))
"""


@pytest.mark.slow
def test_embinit_run_on_defined_tasks_then_report_reproduction_and_the_service_in_later_processes(tmp_path):
    """A CSV classification task defined without labels and a French->English pair, trained by `embinit run`
    (the sweep's Ray workers register each definition from its trial's config); `embinit report`, a
    process that never saw the spec, reads them from the runs' config tags; the reproduction document and
    the service's results route take a store holding them."""
    import yaml
    from mlflow.tracking import MlflowClient
    folder = imdb_folder(tmp_path)
    imdb = {k: v for k, v in IMDB.items() if k != "labels"} | {"description": "IMDB-like reviews"}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = tmp_path / "own.yaml"
    data = spec({"imdb": imdb, "fr_en": FR_EN}, [{"task": "imdb", "data_dir": str(folder)},
                                                 {"task": "fr_en", "data_dir": str(fr_en_folder(tmp_path))}],
                resources={"cpus": 1}, mlflow={"tracking_uri": uri}, defaults={"tokenizer": "whitespace"})
    # the reproduction reads its presets' experiments alone: named as one, its sweep record and stored spec
    # (define_tasks and all) are read, and its trials of other tasks are not the group's
    data["name"] = name = "offline-multi30k-glove50"
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}

    def embinit(*args, timeout=200):
        done = subprocess.run([sys.executable, "-m", "embinit", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=timeout)
        assert done.returncode == 0, (args, done.stderr[-3000:])
        return done.stdout
    embinit("run", str(path), timeout=500)
    rows = list(csv.DictReader(embinit("report", name, "--tracking-uri", uri, "--format", "csv").splitlines()))
    assert sorted((r["task"], r["init"], r["metric"], r["n"]) for r in rows) == [
        ("fr_en", "Xavier", "test/bleu", "1"), ("imdb", "Xavier", "best/val/acc", "1")]
    runs = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name(name).experiment_id],
                                         "tags.`embinit.task` = 'imdb'")
    assert [json.loads(r.data.tags["embinit.labels"]) for r in runs] == [["negative", "positive"]]
    embinit("reproduction", "--tracking-uri", uri, "--out", str(tmp_path / "reproduction.md"))
    assert "imdb" in (tmp_path / "reproduction.md").read_text()   # the stored spec's tasks, in "how it was run"
    later = subprocess.run([sys.executable, "-c", LATER, uri, json.dumps(load_spec(data).recorded())], cwd=tmp_path,
                           env={**env, "PYTHONPATH": os.pathsep.join(sys.path)}, capture_output=True, text=True,
                           timeout=200)
    assert later.returncode == 0, later.stderr[-3000:]
    served = json.loads(later.stdout.splitlines()[-1])
    assert sorted(r["task"] for r in served["report"]["rows"]) == ["fr_en", "imdb"]
    assert sorted(t["status"] for t in served["trials"]) == ["finished", "finished"]


def test_a_defined_task_without_a_data_folder_says_so(monkeypatch):
    monkeypatch.delenv("EMBINIT_DATA_DIR", raising=False)
    TrialConfig(task="imdb", task_def=IMDB)
    with pytest.raises(EmbinitError, match=r"imdb: no --data-dir given and \$EMBINIT_DATA_DIR not set, and the "
                                           r"task has no copy on the hub: give its data_dir"):
        load_task("imdb", None, cache_dir=False)
    with pytest.raises(SpecError, match=r"imdb: no data folder \(give its data_dir"):   # found by the spec check
        from embinit.spec.full_check import check_spec
        check_spec(spec({"imdb": IMDB}, ["imdb"]))


def test_a_spec_without_tasks_of_its_own_keeps_its_hash(tmp_path):
    """The recorded spec (its hash: the service's dedup of submissions, the sweep's `spec.yaml`) gains no
    field from define_tasks unless it defines tasks, and holds each definition once, in define_tasks."""
    plain = load_spec({"name": "plain", "tasks": ["synthetic_lm"], "inits": ["xavier"]}).recorded()
    assert "define_tasks" not in plain and all("definition" not in t for t in plain["tasks"])
    folder = imdb_folder(tmp_path)
    own = load_spec(spec({"imdb": IMDB}, [{"task": "imdb", "data_dir": str(folder)}]))
    recorded = own.recorded()
    assert recorded["define_tasks"]["imdb"]["columns"] == ["review", "sentiment"]
    assert "definition" not in recorded["tasks"][0]
    assert load_spec(recorded).spec_hash() == own.spec_hash()   # a stored spec validates to the same one


@pytest.mark.slow
def test_embinit_train_takes_a_definition_file(tmp_path, capsys):
    import yaml

    from embinit.cli import main
    folder = imdb_folder(tmp_path)
    path = tmp_path / "imdb.yaml"
    path.write_text(yaml.safe_dump({**IMDB, "epochs": 1}))
    assert main(["train", "--task", "imdb", "--task-def", str(path), "--data-dir", str(folder), "--threads", "1",
                 "--quiet", "--json"]) in (0, None)
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "finished" and result["config"]["task_def"]["columns"] == ["review", "sentiment"]
    path.write_text(yaml.safe_dump({**IMDB, "like": "nope"}))
    assert main(["train", "--task", "imdb", "--task-def", str(path), "--data-dir", str(folder), "--quiet"]) == 2
    assert f"--task-def {path}: like: 'nope' is not a built-in task" in capsys.readouterr().err
    path.write_text(yaml.safe_dump({**IMDB, "label": ["a", "b"]}))
    assert main(["train", "--task", "imdb", "--task-def", str(path), "--data-dir", str(folder), "--quiet"]) == 2
    assert f"--task-def {path}: label: unknown field" in capsys.readouterr().err
