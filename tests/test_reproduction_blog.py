"""The reproduction's KNN-blog section (issue 23 item 1): both scores of the blog specs' runs, the
post's number beside its own score, and the experiments not run listed."""

from __future__ import annotations

import pytest

from embinit.tracking import mlflow_store, trial_run
from embinit.reproduction import Group, Inputs, Reproduction, render
from embinit.reproduction.blog import blog_section
from embinit.reproduction.inputs import BLOG_RUNS

pytestmark = pytest.mark.slow  # an MLflow SQLite store takes a few seconds to create

CURVE = {"overlap": [(0, 0.01), (500, 0.30), (1000, 0.20)], "jaccard": [(0, 0.005), (500, 0.18), (1000, 0.11)]}


def _blog_trial(uri, exp, emb_seed, curves):
    cfg = {"task": "wikitext2", "init": "xavier", "seed": 1, "emb_seed": emb_seed, "max_len": 512,
           "batch_size": 12, "lr": 1e-4, "dropout": 0.2, "pre_ln": True, "epochs": 40}
    run = trial_run.TrialRun.open(uri, exp, None, cfg, f"k{emb_seed}", "Xavier", {"axes": {"emb_seed": emb_seed},
                                                                                 "point": {}})
    for score, hist in curves.items():
        for step, v in hist:
            run.log_metrics({f"sim/knn_{score}_mean": v}, step)
    run.finish({"status": "finished", "history": [{"epoch": 1, "val/loss": 5.0}], "test": {},
                "best": {"val/loss": 5.0, "val/ppl": 150.0}, "best_epoch": 1}, [])


@pytest.fixture(scope="module")
def rep(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    exp = mlflow_store.ensure_experiment("blog-exp1-from-scratch-offline", uri)
    _blog_trial(uri, exp, 1, {})             # the reference: logs snapshots, no similarity
    _blog_trial(uri, exp, 2, CURVE)
    m30 = mlflow_store.ensure_experiment("m30", uri)
    _blog_trial(uri, m30, 9, {})
    return Reproduction(uri, Inputs(groups=(Group("m30", "multi30k", "GloVe", "GloVe", "a.yaml"),),
                                    analogy_experiment="t4"))


def test_the_blog_section_shows_both_scores_and_the_posts_number(rep):
    sec = blog_section(rep)
    text = "\n".join(sec.lines)
    assert "seed 1, emb_seed 2" in text and "emb_seed 1" not in text   # the reference compared with nothing
    assert "| overlap | 0.010 | 0.300 (500) | 0.200 (1000) | ~0.26 (peak) |" in text
    assert "| jaccard | 0.005 | 0.180 (500) | 0.110 (1000) | — |" in text
    assert "max_len 512, batch_size 12, lr 0.0001, dropout 0.2, pre_ln True, epochs 40" in text
    missing = [r.experiment for r in BLOG_RUNS if r.experiment != "blog-exp1-from-scratch-offline"]
    assert all(f"`{m}`" in text.split("Not run in this store:")[1] for m in missing)
    rows = rep.exports["blog"]
    assert {(r["score"], r["peak"], r["peak_step"], r["end"]) for r in rows} == {
        ("overlap", 0.30, 500, 0.20), ("jaccard", 0.18, 500, 0.11)}


def test_the_document_carries_the_blog_section(rep):
    doc = render(rep, rep.build())
    assert "## The KNN-similarity blog post: its score beside Jaccard" in doc


def test_a_run_unlike_the_posts_model_says_so(tmp_path):
    """A small check of the blog spec (D = 32, 1 layer, whitespace tokenizer) was printed as "max_len 512,
    ..." beside "the post: ~0.26", reading as the post's setup. Its settings now name D, layers and
    tokenizer, each marked with the post's where they differ; a run as the post's (the task's own
    tokenizer, `auto`: GPT-2; its 6 layers by default) is not marked."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = mlflow_store.ensure_experiment("blog-exp1-from-scratch", uri)
    cfg = {"task": "wikitext2", "init": "xavier", "seed": 1, "max_len": 64, "batch_size": 12, "lr": 1e-4,
           "dropout": 0.2, "pre_ln": True, "epochs": 2}
    for key, extra in (("tiny", {"d_model": 32, "layers": 1, "tokenizer": "whitespace", "emb_seed": 2}),
                       ("post", {"d_model": 512, "emb_seed": 3})):
        run = trial_run.TrialRun.open(uri, exp, None, {**cfg, **extra}, key, "Xavier",
                                      {"axes": {"emb_seed": extra["emb_seed"]}, "point": {}})
        run.log_metrics({"sim/knn_overlap_mean": 0.1, "sim/knn_jaccard_mean": 0.05}, 0)
        run.finish({"status": "finished", "history": [{"epoch": 1, "val/loss": 5.0}], "test": {},
                    "best": {"val/loss": 5.0}, "best_epoch": 1}, [])
    rep = Reproduction(uri, Inputs(groups=(Group("blog-exp1-from-scratch", "multi30k", "GloVe", "GloVe", "a.yaml"),),
                                   analogy_experiment="none"))
    text = "\n".join(blog_section(rep).lines)
    assert ("the post: ~26% (peak), with d_model 512 (the post), layers 6 (the post's code), tokenizer gpt2 "
            "(the post)") in text
    assert ("| seed 1, emb_seed 2 | d_model 32 **(the post: 512)**, layers 1 **(the post's code: 6)**, tokenizer "
            "whitespace **(the post: gpt2)**, max_len 64, batch_size 12,") in text
    assert "| seed 1, emb_seed 3 | d_model 512, layers 6, tokenizer gpt2, max_len 64," in text


def test_the_gpu_preset_reads_its_own_blog_experiments(tmp_path):
    """The GPU preset read the CPU blog experiments (`blog-exp1-from-scratch`, ...), so the runs of
    tune_configs/gpu/run_batch.sh blog1/blog2 (`gpu-blog-exp1`, `gpu-blog-exp2-*`) were "not run in this
    store". It now reads those, and tells experiment 1's untied and tied twins apart."""
    from embinit.reproduction.inputs import GPU_INPUTS
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = mlflow_store.ensure_experiment("gpu-blog-exp1", uri)
    for tie, peak in ((False, 0.30), (True, 0.40)):
        cfg = {"task": "wikitext2", "init": "xavier", "seed": 1, "emb_seed": 2, "tie_embeddings": tie,
               "epochs": 40}
        run = trial_run.TrialRun.open(uri, exp, None, cfg, f"k{tie}", "Xavier",
                                      {"axes": {"tie_embeddings": tie, "emb_seed": 2}, "point": {}})
        for step, v in ((0, 0.01), (500, peak), (1000, 0.2)):
            run.log_metrics({"sim/knn_overlap_mean": v}, step)
        run.finish({"status": "finished", "history": [{"epoch": 1, "val/loss": 5.0}], "test": {},
                    "best": {"val/loss": 5.0}, "best_epoch": 1}, [])
    mlflow_store.ensure_experiment("m30", uri)
    rep = Reproduction(uri, Inputs(**{**vars(GPU_INPUTS), "groups": (Group("m30", "multi30k", "GloVe", "GloVe",
                                                                          "a.yaml"),)}))
    text = "\n".join(blog_section(rep).lines)
    assert "(`gpu-blog-exp1`, tune_configs/gpu/blog_exp1.yaml)" in text
    assert "| seed 1, emb_seed 2, tie_embeddings False |" in text
    assert "| seed 1, emb_seed 2, tie_embeddings True |" in text
    assert "Not run in this store: `gpu-blog-exp2-untied`, `gpu-blog-exp2-tied`" in text
    assert "blog-exp1-from-scratch" not in text
    assert {(r["axes"]["tie_embeddings"], r["peak"]) for r in rep.exports["blog"] if r["score"] == "overlap"} == {
        (False, 0.30), (True, 0.40)}
