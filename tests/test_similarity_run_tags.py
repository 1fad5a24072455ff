"""A trial run records the similarity analysis's settings it was measured with (`embinit.similarity.*`
tags: K, the neighbour measure, the scores, how often, which reference), outside its key and config; a
rerun that continues the run under other settings never fails on them and says what changed; the
reproduction reads a run's own settings before its sweep's spec.yaml (embinit.reproduction.knn_settings)."""

from __future__ import annotations

import pytest

from embinit.config import TrialConfig
from embinit.sweep.analyses import run_tags
from embinit.tracking import mlflow_store, records, run_readers, run_writers, trial_run

pytestmark = pytest.mark.slow  # an MLflow SQLite store takes a few seconds to create

CFG = {"task": "synthetic_lm", "init": "xavier", "seed": 1}


def _settings(**sim) -> dict:
    return {"probe": None, "similarity": {"every_n_steps": 500, "k": 10, "metric": "jaccard", "neighbours": "dot",
                                          "reference": None, "reference_seed": None, "reference_emb_seed": None,
                                          "snapshot_dir": "/snaps", "wait_s": 0.0, **sim}}


def test_run_tags_name_k_measure_scores_steps_and_the_reference():
    cfg, ref = TrialConfig.from_dict(CFG), TrialConfig.from_dict({**CFG, "seed": 0})
    tags = run_tags(_settings(reference_seed=0, k=5, neighbours="cosine", metric=["overlap", "jaccard"],
                              every_n_steps=20), cfg)
    assert tags == {"embinit.similarity.k": "5", "embinit.similarity.neighbours": "cosine",
                    "embinit.similarity.scores": "overlap,jaccard", "embinit.similarity.every_n_steps": "20",
                    "embinit.similarity.reference": "reference_seed 0"}
    assert run_tags(_settings(reference_seed=0), ref)["embinit.similarity.reference"] == \
        "reference_seed 0 (this run is the reference)"
    assert run_tags(_settings(reference_emb_seed=3), cfg)["embinit.similarity.reference"] == "reference_emb_seed 3"
    assert run_tags(_settings(reference="/refs/glove.txt", snapshot_dir=None), cfg)[
        "embinit.similarity.reference"] == "fixed /refs/glove.txt"
    assert run_tags(_settings(), cfg)["embinit.similarity.reference"] == "none (snapshots only)"
    assert run_tags(None, cfg) == {} and run_tags({"probe": {"n_samples": 100}, "similarity": None}, cfg) == {}
    # outside the key: the trial's key and config are the same with and without the analysis
    assert cfg.key() == TrialConfig.from_dict(CFG).key()


def _open(uri, exp, parent, run_id=None, resumed=None):
    return trial_run.TrialRun.open(uri, exp, parent, CFG, "key1", "Xavier", {"axes": {}, "point": {}},
                                   run_id=run_id, resumed_epoch=resumed)


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = mlflow_store.ensure_experiment("sim-tags", uri)
    return uri, exp


def _record(uri, run_id) -> records.TrialRecord:
    return records.from_run(mlflow_store.client(uri).get_run(run_id))


def test_the_settings_go_on_the_run_with_its_next_write_and_are_read_back(store):
    uri, exp = store
    run = _open(uri, exp, None)
    run.note_similarity(run_tags(_settings(reference_seed=0, k=3), TrialConfig.from_dict(CFG)))
    assert _record(uri, run.run_id).similarity == {}      # not a write of its own
    run.log_metrics({"sim/knn_jaccard_mean": 0.2}, 0)
    rec = _record(uri, run.run_id)
    assert rec.similarity == {"k": "3", "neighbours": "dot", "scores": "jaccard", "every_n_steps": "500",
                              "reference": "reference_seed 0"}
    params = mlflow_store.client(uri).get_run(run.run_id).data.params
    assert not any("similarity" in p for p in params) and "k" not in rec.config   # not params, not the config


def test_a_resume_under_other_settings_does_not_fail_and_says_what_changed(store):
    uri, exp = store
    cfg = TrialConfig.from_dict(CFG)
    first = _open(uri, exp, None)
    first.note_similarity(run_tags(_settings(reference_seed=0, k=3), cfg))
    first.log_metrics({"sim/knn_jaccard_mean": 0.2}, 0)
    first.log_epoch(1, {"val/loss": 3.0}, checkpoint=True)
    again = _open(uri, exp, None, run_id=first.run_id, resumed=1)   # the same spec: the same values again
    again.note_similarity(run_tags(_settings(reference_seed=0, k=3), cfg))
    again.log_metrics({"sim/knn_jaccard_mean": 0.3}, 10)
    assert "changed" not in _record(uri, first.run_id).similarity
    other = _open(uri, exp, None, run_id=first.run_id, resumed=1)   # a spec with another K continues it
    other.note_similarity(run_tags(_settings(reference_seed=0, k=5, neighbours="cosine"), cfg))
    other.log_metrics({"sim/knn_jaccard_mean": 0.4}, 20)
    rec = _record(uri, first.run_id)
    assert rec.run_id == first.run_id and rec.similarity["k"] == "5" and rec.similarity["neighbours"] == "cosine"
    assert rec.similarity["changed"] == "k 3 -> 5, neighbours dot -> cosine"
    last = _open(uri, exp, None, run_id=first.run_id, resumed=1)
    last.note_similarity(run_tags(_settings(reference_seed=0, k=7, neighbours="cosine"), cfg))
    last.log_metrics({"sim/knn_jaccard_mean": 0.5}, 30)
    assert _record(uri, first.run_id).similarity["changed"] == "k 3 -> 5, neighbours dot -> cosine; k 5 -> 7"


def test_the_reproduction_reads_a_runs_own_settings_before_its_sweeps_spec(store, monkeypatch):
    """A run with its own `embinit.similarity.*` tags is read from them, whatever its sweep's spec.yaml
    says; an older run without them from its sweep's spec; a run with neither is not recorded."""
    from embinit.reproduction.data import ReproductionData
    from embinit.reproduction.inputs import load_trials
    from embinit.reproduction.knn_settings import run_settings
    uri, exp = store
    spec = ("name: sim-tags\ntasks: [synthetic_lm]\ninits: [xavier]\nseeds: 3\nanalyses:\n"
            "  similarity: {reference_seed: 0, k: 5, neighbours: cosine}\n")
    sweep = run_writers.start_parent_run(exp, uri, "e" * 16, spec, 3)
    ids = {}
    for key, parent, tags in (("own", sweep, {"k": 8, "neighbours": "dot"}), ("old", sweep, None),
                              ("none", None, None)):
        run = trial_run.TrialRun.open(uri, exp, parent, {**CFG, "seed": len(ids) + 1}, key, "Xavier",
                                      {"axes": {}, "point": {}})
        if tags:
            run.note_similarity(run_tags(_settings(reference_seed=0, **tags), TrialConfig.from_dict(CFG)))
        run.log_metrics({"sim/knn_jaccard_mean": 0.2}, 0)
        ids[key] = run.run_id
    trials, sweeps = load_trials("sim-tags", uri)
    rep = ReproductionData.__new__(ReproductionData)   # only its spec reader: no experiments to load
    rep.uri, rep._specs = uri, {}
    read, real = [], run_readers.artifact_text
    monkeypatch.setattr(run_readers, "artifact_text", lambda r, name, u=None: read.append(r.run_id) or real(r, name, u))
    got = run_settings(trials, sweeps, rep.sweep_spec)
    assert got == {ids["own"]: (8, "dot"), ids["old"]: (5, "cosine"), ids["none"]: None}
    assert read == [sweep]   # the spec is read for the run that lacks its own settings, once


def test_the_reproduction_says_which_runs_curves_mix_settings(store):
    """A run a rerun continued under other settings (its `embinit.similarity.changed` tag) holds its latest
    K: the similarity section says so beside K, naming the run and what changed
    (`knn_settings.changed_text`); a run that never changed adds nothing."""
    from embinit.reproduction import Group, Inputs, Reproduction
    from embinit.reproduction.knn_settings import changed_text
    from embinit.reproduction.similarity import similarity_section
    uri, exp = store
    cfg, done = TrialConfig.from_dict(CFG), {"status": "finished", "history": [{"epoch": 1, "val/loss": 3.0}],
                                            "test": {}, "best": {"val/loss": 3.0}, "best_epoch": 1}
    runs = []
    for seed, key in ((1, "a"), (2, "b")):
        run = trial_run.TrialRun.open(uri, exp, None, {**CFG, "seed": seed}, key, "Xavier", {"axes": {}, "point": {}})
        run.note_similarity(run_tags(_settings(reference_seed=0, k=3), cfg))
        run.log_metrics({"sim/knn_jaccard_mean": 0.2}, 0)
        run.log_epoch(1, {"val/loss": 3.0}, checkpoint=True)
        runs.append(run)
    runs[0].finish(done, [])
    again = trial_run.TrialRun.open(uri, exp, None, {**CFG, "seed": 2}, "b", "Xavier", {"axes": {}, "point": {}},
                                    run_id=runs[1].run_id, resumed_epoch=1)
    again.note_similarity(run_tags(_settings(reference_seed=0, k=5), cfg))
    again.log_metrics({"sim/knn_jaccard_mean": 0.3}, 10)
    again.finish(done, [])
    rep = Reproduction(uri, Inputs(groups=(Group("sim-tags", "synthetic_lm", "Xavier", "Xavier", "a.yaml"),),
                                   analogy_experiment="none"))
    text = "\n".join(similarity_section(rep).lines)
    assert ("the runs differ: K = 3, inner product (1 run); K = 5, inner product (1 run); the settings changed "
            f"during training in 1 run (a rerun continued it under another spec), so its curves mix settings: "
            f"{runs[1].run_id[:8]}: k 3 -> 5") in text, text
    assert changed_text([_record(uri, runs[0].run_id)]) == ""
