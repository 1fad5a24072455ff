"""A spec run again after its pretrained file was copied elsewhere trains nothing (trial keys count the
file's content, embinit.file_inputs), and a rerun with nothing to train links the spec's finished sweep
run instead of adding an empty one (issue 22, items 13 and 14). Local Ray, temporary SQLite store."""

from __future__ import annotations

import shutil

import pytest

from embinit.tracking import mlflow_store, records, run_names, run_readers, run_writers
from embinit.spec import load_spec
from embinit.sweep import run_sweep
from embinit.tasks.synthetic import LEXICON
from helpers.sweep import sweep_spec_data

pytestmark = pytest.mark.slow

TINY = {"task": "synthetic_translation", "epochs": 1, "max_train_examples": 64, "ff_dim": 16, "heads": 2}


def vectors(path, dim=8):
    words = sorted(set(LEXICON.values()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{w} " + " ".join(f"{(i + j) % 7 / 10:.1f}" for j in range(dim)) + "\n"
                            for i, w in enumerate(words)))
    return str(path)


def spec(tmp, pretrained: str):
    return load_spec(sweep_spec_data("copied", tmp, TINY, inits=["glove"], seeds=2, pretrained=pretrained,
                                     description="GloVe rows, copied file"))


def runs(uri: str, kind: str | None) -> list:
    exp = mlflow_store.experiment_id("copied", uri)
    return [r for r in mlflow_store.search_runs(exp, uri)
            if (records.KEY_TAG in r.data.tags if kind is None else r.data.tags.get(records.KIND_TAG) == kind)]


def test_a_copied_pretrained_file_reuses_its_trials_and_a_rerun_links_its_sweep(ray_local, tmp_path):
    first = spec(tmp_path, vectors(tmp_path / "a" / "glove.txt"))
    uri = mlflow_store.resolve_uri(first.mlflow.tracking_uri)
    done = run_sweep(first, progress=False)
    assert (done.planned, done.reused, done.n_finished, done.linked) == (2, 0, 2, False)
    sweep = mlflow_store.client(uri).get_run(done.parent_run_id)
    assert sweep.info.run_name == "copied #1"                                 # the spec's first sweep
    exp = mlflow_store.client(uri).get_experiment(done.experiment_id)
    assert exp.tags[run_names.NOTE_TAG] == "GloVe rows, copied file"         # the spec's description
    assert {r.info.run_name for r in runs(uri, None)} == {"GloVe-s0", "GloVe-s1"}   # label and seed
    for trial in runs(uri, None):
        assert int(trial.data.params["model_parameters"]) > 0 and trial.data.params["init"] == "GloVe"

    again = run_sweep(first, progress=False)                                 # nothing to train
    assert (again.reused, again.n_finished, again.linked) == (2, 2, True)
    assert again.parent_run_id == done.parent_run_id and len(runs(uri, "sweep")) == 1

    keys = {p.key for p in first.plan()}
    (tmp_path / "b").mkdir()
    copy = shutil.copy(tmp_path / "a" / "glove.txt", tmp_path / "b" / "moved.txt")
    shutil.rmtree(tmp_path / "a")
    moved = spec(tmp_path, str(copy))
    assert {p.key for p in moved.plan()} == keys
    result = run_sweep(moved, progress=False)
    assert (result.reused, result.n_finished) == (2, 2)
    assert len(runs(uri, None)) == 2                                          # no trial trained again
    assert [r["mean"] for r in result.report.rows] == [r["mean"] for r in done.report.rows]
    # the trials keep the path they trained from (provenance); the key holds the content
    assert {r.data.params["pretrained"] for r in runs(uri, None)} == {str(tmp_path / "a" / "glove.txt")}


def test_a_worker_records_the_key_its_driver_planned(tmp_path, monkeypatch):
    """A driver that cannot read the file keys it by path; the worker, which can, must still record the
    trial under the driver's key, or the driver's dedup and report would never find it."""
    from dataclasses import replace

    from ray import tune

    from embinit.sweep.trainable import train_unit
    from embinit.sweep.work import SweepContext, Unit, units_to_run
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: None)
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    s = load_spec(sweep_spec_data("driver", tmp_path, TINY, pretrained=vectors(tmp_path / "glove.txt"),
                                  inits=["glove"], mlflow={"tracking_uri": f"sqlite:///{tmp_path}/m.db",
                                                           "log_plots": False, "log_checkpoint": False}))
    (unit,), _ = units_to_run(s, set())
    planned = replace(unit.trials[0], key="key-the-driver-planned")
    uri = mlflow_store.resolve_uri(s.mlflow.tracking_uri)
    exp = mlflow_store.ensure_experiment("driver", uri)
    shared = SweepContext(uri, exp, run_writers.start_parent_run(exp, uri, s.spec_hash(), s.to_yaml(), 1),
                          log_checkpoint=False, log_plots=False, cache_dir=s.cache_dir)
    train_unit({"unit": 0}, shared, [Unit((planned,))])
    (run,) = [r for r in mlflow_store.search_runs(exp, uri) if records.KEY_TAG in r.data.tags]
    assert run.info.status == "FINISHED" and run.data.tags[records.KEY_TAG] == "key-the-driver-planned"
    assert "key-the-driver-planned" in run_readers.finished_keys(exp, uri)
