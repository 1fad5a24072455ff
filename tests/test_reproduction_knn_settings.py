"""The K and neighbour measure the reproduction's similarity and blog sections state are the ones the runs
used (the spec of the sweep run that trained each, `embinit.reproduction.knn_settings`), not a fixed
"K = 10, inner product"; runs that differ are all named, and runs without a recorded spec are counted."""

from __future__ import annotations

import pytest

from embinit.reproduction import Group, Inputs, Reproduction
from embinit.reproduction.blog import blog_section
from embinit.reproduction.knn_settings import settings_text
from embinit.reproduction.similarity import similarity_section
from embinit.tracking import mlflow_store, run_writers, trial_run

pytestmark = pytest.mark.slow  # an MLflow SQLite store takes a few seconds to create


def _spec(name: str, k: int, neighbours: str, metric: str = "jaccard") -> str:
    return (f"name: {name}\ntasks: [multi30k]\ninits: [xavier]\nseeds: 3\nanalyses:\n"
            f"  similarity: {{reference_seed: 0, k: {k}, neighbours: {neighbours}, metric: {metric}}}\n")


def _trial(uri, exp, parent, key, task, label, seed, scores=("jaccard",), extra=None):
    cfg = {"task": task, "init": label.lower(), "seed": seed, "train_embeddings": True, "pos_encoding": True,
           **(extra or {})}
    run = trial_run.TrialRun.open(uri, exp, parent, cfg, key, label, {"axes": {}, "point": {}})
    for score in scores:
        run.log_metrics({f"sim/knn_{score}_mean": 0.1}, 0)
        run.log_metrics({f"sim/knn_{score}_mean": 0.3}, 100)
    run.finish({"status": "finished", "history": [{"epoch": 1, "val/loss": 3.0}], "test": {"test/bleu": 20.0},
                "best": {"val/loss": 3.0, "val/acc": 0.8}, "best_epoch": 1}, [])


@pytest.fixture(scope="module")
def rep(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    m30 = mlflow_store.ensure_experiment("m30", uri)
    cosine5 = run_writers.start_parent_run(m30, uri, "a" * 16, _spec("m30", 5, "cosine"), 4)
    dot10 = run_writers.start_parent_run(m30, uri, "b" * 16, _spec("m30", 10, "dot"), 1)
    for seed in (1, 2):
        _trial(uri, m30, cosine5, f"x{seed}", "multi30k", "Xavier", seed)
    _trial(uri, m30, cosine5, "g1", "multi30k", "GloVe", 1)
    _trial(uri, m30, dot10, "g2", "multi30k", "GloVe", 2)       # a later sweep with other settings
    sst = mlflow_store.ensure_experiment("sst", uri)
    dot7 = run_writers.start_parent_run(sst, uri, "c" * 16, _spec("sst", 7, "dot"), 2)
    _trial(uri, sst, dot7, "s1", "sst2", "MiniLM", 1)
    _trial(uri, sst, None, "s2", "sst2", "MiniLM", 2)            # no sweep run: its settings are not recorded
    blog = mlflow_store.ensure_experiment("blog-exp1-from-scratch-offline", uri)
    cosine3 = run_writers.start_parent_run(blog, uri, "d" * 16, _spec("blog", 3, "cosine", "[overlap, jaccard]"), 1)
    _trial(uri, blog, cosine3, "b2", "wikitext2", "Xavier", 1, ("overlap", "jaccard"), {"emb_seed": 2})
    return Reproduction(uri, Inputs(groups=(Group("m30", "multi30k", "GloVe", "GloVe", "a.yaml"),
                                            Group("sst", "sst2", "MiniLM", "BERT", "b.yaml")),
                                    analogy_experiment="none"))


def test_the_similarity_section_states_each_experiments_k_and_measure(rep):
    sec = similarity_section(rep)
    text = "\n".join(sec.lines)
    assert "K = 10, inner product" not in sec.title
    assert "**multi30k, GloVe** (`m30`; the runs differ: K = 5, cosine (3 runs); K = 10, inner product (1 run))" in text
    assert "**sst2, MiniLM** (`sst`; K = 7, inner product; not recorded for 1 run)" in text
    assert "its 10 nearest" not in text


def test_the_blog_section_states_the_k_and_measure_its_runs_used(rep):
    text = "\n".join(blog_section(rep).lines)
    assert "K = 10, inner product" not in text.split("its runs' KNN")[0]   # only as the post's, beside the runs'
    assert "its runs' KNN: K = 3, cosine **(the post's code: K = 10, inner product)**" in text


def test_settings_text_says_what_is_not_recorded():
    assert settings_text([None, None]).startswith("K and the neighbour measure not recorded")
    assert settings_text([(10, "dot"), (10, "dot")]) == "K = 10, inner product"


def test_one_document_reads_each_sweeps_spec_once(rep, monkeypatch):
    """The runs section shows each sweep's spec.yaml and the similarity and blog sections read K from it:
    one download per sweep run for the whole document (`ReproductionData.sweep_spec`), including a sweep
    whose spec is read as missing, not one per section."""
    from embinit.reproduction import Reproduction
    from embinit.tracking import run_readers
    from embinit.tracking.run_records import SPEC_ARTIFACT
    read, real = [], run_readers.artifact_text
    monkeypatch.setattr(run_readers, "artifact_text", lambda r, path, uri=None: (
        read.append(r.run_id) if path == SPEC_ARTIFACT else None) or real(r, path, uri))
    fresh = Reproduction(rep.uri, rep.inputs)   # the module's `rep` has read its specs already
    sections = {s.title: s for s in fresh.build()}
    assert "K = 5, cosine (3 runs)" in "\n".join(sections["KNN match similarity between seeds"].lines)
    sweeps = {r["run_id"] for r in fresh.exports["runs"]}
    assert len(sweeps) == 3 and sweeps <= set(read)   # m30's two sweeps and sst's, read by both sections
    assert len(read) == len(set(read)) == 4, read      # and the blog experiment's sweep, each once


def test_a_sweep_without_a_spec_is_read_as_missing_once(rep, monkeypatch):
    from embinit.reproduction import Reproduction
    from embinit.tracking import run_readers
    from embinit.tracking.records import KIND_TAG
    exp = mlflow_store.ensure_experiment("no-spec", rep.uri)
    mlflow_store.client(rep.uri).create_run(exp, run_name="old", tags={KIND_TAG: "sweep"})
    (run,) = run_readers.sweep_records(exp, rep.uri)
    read, real = [], run_readers.artifact_text
    monkeypatch.setattr(run_readers, "artifact_text", lambda r, path, uri=None: read.append(r.run_id) or
                        real(r, path, uri))
    fresh = Reproduction(rep.uri, rep.inputs)
    assert fresh.sweep_spec(run) is None and fresh.sweep_spec(run) is None and read == [run.run_id]
