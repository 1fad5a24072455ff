"""The reproduction report from MLflow: rows matched to the paper's by role, Table 3 cells read from each
trial's config, Table 4 from analogy runs, KNN similarity from logged histories, verdicts from Welch
intervals, exports. Runs are written with embinit.tracking.trial_run into a temporary SQLite store; the values are
chosen so the expected statistics are known."""

from __future__ import annotations

import csv
import json
import math
import statistics

import pytest
from scipy import stats

from embinit.tracking import mlflow_store, run_writers, trial_run
from embinit.cli import main
from embinit.config import metric_range
from embinit.errors import EmbinitError
from embinit.reproduction import (Group, Inputs, Reproduction, paired, render, role_of, verdict, welch,
                                  write_exports)
from embinit.reproduction.findings import findings_section

pytestmark = pytest.mark.slow  # an MLflow SQLite store takes a few seconds to create

BLEU = {"Xavier": [20.0, 21.0, 22.0], "GloVe": [15.0, 16.0, 17.0], "GloVe_Xavier": [21.0, 22.0, 23.5],
        "GloVe_Shuffled": [18.0, 19.0, 17.5], "Xavier_GloVe": [19.0, 20.0, 21.0]}
ACC = {"Xavier": [0.80, 0.81, 0.82], "MiniLM": [0.80, 0.82, 0.81], "MiniLM_Xavier": [0.70, 0.71, 0.72],
       "MiniLM_Shuffled": [0.79, 0.80, 0.78], "Xavier_MiniLM": [0.81, 0.80, 0.79]}
STD = {"Xavier": 0.02, "GloVe": 0.4, "GloVe_Xavier": 0.02, "GloVe_Shuffled": 0.4, "Xavier_GloVe": 0.4,
       "MiniLM": 0.04, "MiniLM_Xavier": 0.01, "MiniLM_Shuffled": 0.04, "Xavier_MiniLM": 0.04}


def _trial(uri, exp, key, task, label, seed, test, best, *, te=True, pe=True, sim=None, axes=None):
    # the paper's schedule and model size (a smaller budget makes verdicts "not comparable", tested in
    # tests/test_reproduction_frame.py)
    size = {"d_model": 300, "heads": 10, "epochs": 20} if task == "multi30k" else \
        {"d_model": 768, "heads": 8, "epochs": 5}
    cfg = {"task": task, "init": label.lower(), "seed": seed, **size, "layers": 3,
           "batch_size": 64, "lr": 2e-4, "train_embeddings": te, "pos_encoding": pe}
    run = trial_run.TrialRun.open(uri, exp, None, cfg, key, label, {"axes": axes or {}, "point": {}})
    for step, v in (sim or []):
        run.log_metrics({"sim/knn_jaccard_mean": v}, step)
    sd = STD[label]
    init_stats = {"emb/min": -3 * sd, "emb/max": 3 * sd, "emb/mean": 0.0, "emb/std": sd, "emb/rows": 100.0,
                  "emb/scaled_std": sd * math.sqrt(50), "emb/pe_std": 0.7, "emb/absorption": sd * math.sqrt(50) / 0.7}
    run.finish({"status": "finished", "history": [{"epoch": 1, "val/loss": best["val/loss"]}], "test": test,
                "best": best, "best_epoch": 1 + seed % 2, "emb_stats_init": init_stats}, [])


def _study_trial(uri, exp, key, label, seed, axes, loss, oov="xavier"):
    cfg = {"task": "multi30k", "init": label.lower(), "seed": seed, "oov": oov}
    run = trial_run.TrialRun.open(uri, exp, None, cfg, key, label, {"axes": axes, "point": {}})
    test = {"test/loss": loss + 0.1, "test/bleu": 30 - 5 * loss, "oov/val_loss": loss, "oov/val_bleu": 10 - loss,
            "oov/test_loss": loss, "oov/test_bleu": 10 - loss}
    run.finish({"status": "finished", "history": [{"epoch": 1, "val/loss": loss}], "test": test,
                "best": {"val/loss": loss}, "best_epoch": 1}, [])


def _studies(uri):
    """Small dose-response and OOV-rule experiments (the studies beyond the paper; their sections are
    tested in tests/test_reproduction_beyond.py); GloVe at 1x, seed 0 is run again under another key
    with another value: the seed counts by that newer run."""
    dose = mlflow_store.ensure_experiment("dose", uri)
    for i, label in enumerate(("Xavier", "GloVe_Shuffled", "GloVe")):
        for sigma in ("1x", "4x"):
            for seed in (0, 1, 2):
                _study_trial(uri, dose, f"{label}{sigma}{seed}", label, seed, {"sigma": sigma},
                             4.0 + i / 10 - seed / 20 + (sigma == "4x") * seed / 7)
    _study_trial(uri, dose, "GloVe1x0-again", "GloVe", 0, {"sigma": "1x"}, 3.5)
    oov = mlflow_store.ensure_experiment("oov", uri)
    for i, rule in enumerate(("xavier", "focus")):
        for seed in (0, 1, 2):
            _study_trial(uri, oov, f"{rule}{seed}", "GloVe_Xavier", seed, {"oov": rule},
                         4.1 - i / 10 + (1 + i) * seed ** 2 / 50, oov=rule)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    m30 = mlflow_store.ensure_experiment("m30", uri)
    for label, vals in BLEU.items():
        for seed, v in enumerate(vals):
            sim = [(0, 1.0 if label == "GloVe" else 0.01), (100, 0.2 + seed / 10)] if seed else None
            _trial(uri, m30, f"{label}{seed}", "multi30k", label, seed, {"test/bleu": v}, {"val/loss": 3.0 - v / 100},
                   sim=sim)
    # the ablation's other cells, seed 0 (the trainable + PE cell is the main trial above)
    for label, base in (("Xavier", 10.0), ("GloVe", 12.0), ("GloVe_Xavier", 11.0)):
        for te, pe, add in ((False, False, 0.0), (True, False, 1.0), (False, True, 5.0)):
            _trial(uri, m30, f"{label}-{te}-{pe}", "multi30k", label, 0, {"test/bleu": base + add}, {"val/loss": 4.0},
                   te=te, pe=pe, axes={"train_embeddings": te, "pos_encoding": pe})
    sst = mlflow_store.ensure_experiment("sst", uri)
    for label, vals in ACC.items():
        for seed, v in enumerate(vals):
            _trial(uri, sst, f"s{label}{seed}", "sst2", label, seed, {}, {"val/acc": v, "val/loss": 0.4})
    for seed in (0, 1):
        rows = [{"label": "GloVe", "steps": [], "correct": 60, "total": 100, "accuracy": 60.0, "paper": None},
                {"label": "GloVe & Xavier-Std.", "steps": ["standardize"], "correct": 60, "total": 100,
                 "accuracy": 60.0, "paper": None},
                {"label": "GloVe & Pos. Enc.", "steps": ["pe"], "correct": 2 + seed, "total": 100,
                 "accuracy": 2.0 + seed, "paper": "1424/1631 (87.3)"},
                {"label": "GloVe & Xavier-Std. & Pos. Enc.", "steps": ["standardize", "pe"], "correct": 0,
                 "total": 100, "accuracy": 0.0, "paper": "210/1631 (12.9)"}]
        rows[2]["pe_ratio"], rows[3]["pe_ratio"] = 1.0 + seed, 0.02
        sweep = [{"ratio": 0.1, "correct": 1, "total": 100, "accuracy": 1.0 + seed},
                 {"ratio": 10.0, "correct": 59, "total": 100, "accuracy": 59.0}]
        run_writers.log_analysis_run("t4", uri, "analogy", f"a{seed}", {"seed": seed},
                                  {"analogy/raw/correct": 60.0}, {"rows": rows, "params": {"seed": seed, "top": 5893},
                                                                  "ratio_sweep": sweep})
    _studies(uri)
    inputs = Inputs(groups=(Group("m30", "multi30k", "GloVe", "GloVe", "a.yaml"),
                            Group("sst", "sst2", "MiniLM", "BERT", "b.yaml")), analogy_experiment="t4",
                    dose_experiment="dose", oov_experiment="oov")
    rep = Reproduction(uri, inputs)
    return uri, inputs, rep, rep.build()


def test_roles():
    assert role_of("GloVe_Xavier", "GloVe") == "P_Xavier" and role_of("Xavier_MiniLM", "MiniLM") == "Xavier_P"
    assert role_of("Xavier", "GloVe") == "Xavier" and role_of("MiniLM", "GloVe") is None


def test_welch_matches_scipy():
    a, b = [1.0, 2.0, 4.0], [3.0, 5.0, 6.0, 8.0]
    c = welch(a, b)
    res = stats.ttest_ind(a, b, equal_var=False)
    lo, hi = res.confidence_interval(0.95)
    assert c["diff"] == pytest.approx(sum(a) / 3 - sum(b) / 4)
    assert (c["diff"] - c["ci95"], c["diff"] + c["ci95"]) == (pytest.approx(lo), pytest.approx(hi))
    assert welch([1.0], [2.0, 3.0])["ci95"] is None and welch([], [1.0])["diff"] is None


def test_paired_t_on_shared_seeds_and_welch_otherwise():
    a, b = {0: 20.0, 1: 22.0, 2: 21.5}, {0: 19.0, 1: 21.5, 2: 20.0}
    c = paired(a, b)
    res = stats.ttest_rel([20.0, 22.0, 21.5], [19.0, 21.5, 20.0])
    lo, hi = res.confidence_interval(0.95)
    assert c["test"] == "paired t" and c["diff"] == pytest.approx(1.0)
    assert (c["diff"] - c["ci95"], c["diff"] + c["ci95"]) == (pytest.approx(lo), pytest.approx(hi))
    # pairing removes the seed effect: Welch on the same numbers is far wider
    assert c["ci95"] < welch(list(a.values()), list(b.values()))["ci95"] / 2
    # a seed missing on one side drops that seed only: paired on the two shared seeds
    unequal = paired(a, {0: 19.0, 1: 21.5, 3: 20.0})
    assert (unequal["test"], unequal["pairs"], unequal["diff"]) == ("paired t", 2, pytest.approx(0.75))
    disjoint = paired(a, {5: 19.0, 6: 21.5, 7: 20.0})   # Welch only when no seed is shared
    assert disjoint["test"] == "Welch" and disjoint["pairs"] == 0 and disjoint["ci95"] == pytest.approx(
        welch(list(a.values()), [19.0, 21.5, 20.0])["ci95"])


def test_verdicts():
    assert verdict({"diff": -2.0, "ci95": 1.0, "n": (3, 3)}, -1) == "reproduces"
    assert verdict({"diff": 2.0, "ci95": 1.0, "n": (3, 3)}, -1) == "contradicts"
    # an interval across 0 and wider than the paper's effect (or without one) is inconclusive
    assert verdict({"diff": -0.5, "ci95": 1.0, "n": (3, 3)}, -1, effect=-0.8).startswith("inconclusive (same dir")
    assert verdict({"diff": 0.5, "ci95": 1.0, "n": (3, 3)}, -1).startswith("inconclusive (opposite direction")
    assert verdict({"diff": -0.5, "ci95": 2.0, "n": (3, 3)}, +1, tolerate=True, effect=1.8).startswith("inconclusive")
    # narrower than the paper's effect: on par for a tolerant claim, not reproduced for a directional one
    on_par = verdict({"diff": -0.2, "ci95": 0.5, "n": (5, 5)}, +1, tolerate=True, effect=1.8)
    assert on_par.startswith("reproduces (on par")
    assert verdict({"diff": 0.2, "ci95": 0.5, "n": (5, 5)}, -1, effect=-3.2).startswith("does not reproduce")
    assert verdict({"diff": -0.8, "ci95": 1.0, "n": (5, 5)}, -1, effect=-1.5).startswith("inconclusive")
    assert verdict({"diff": -2.0, "ci95": 1.0, "n": (3, 3)}, +1, tolerate=True) == "contradicts"
    assert verdict({"diff": 1.0, "ci95": None, "n": (1, 1)}, +1).startswith("same direction (n = 1 vs 1")


def test_the_findings_legend_reads_intervals_as_verdict_does():
    """The document's legend says when each verdict is given; `verdict` compares the interval's half-width
    with the paper's effect, and a directional claim's narrow interval that holds the effect is inconclusive."""
    from embinit.reproduction.findings import _findings_legend
    # [-0.8, 1.2] against the paper's -1.5: 2.0 wide in all, half-width 1.0 < 1.5, the effect outside it
    assert verdict({"diff": 0.2, "ci95": 1.0, "n": (5, 5)}, -1, effect=-1.5).startswith("does not reproduce")
    # [-1.8, 0.2]: half-width 1.0 < 1.5 too, but it holds both 0 and -1.5
    assert verdict({"diff": -0.8, "ci95": 1.0, "n": (5, 5)}, -1, effect=-1.5).startswith("inconclusive")
    legend = _findings_legend()[0]
    assert "its half-width (the ± of the interval) is larger than the difference the paper reports" in legend
    assert "it holds both 0 and the paper's difference" in legend
    assert "the same, and it excludes the paper's difference" in legend


def test_a_zero_difference_reads_as_no_difference():
    """a − b = 0 lies on neither side of 0: not the paper's direction, not the opposite one, with or
    without an interval; the legend names that reading."""
    from embinit.reproduction.findings import _findings_legend
    tied = paired({1: 20.0, 2: 21.0, 3: 22.0}, {1: 20.0, 2: 21.0, 3: 22.0})   # the same value on every seed
    assert (tied["diff"], tied["ci95"]) == (0.0, None)
    for expected in (+1, -1):
        said = verdict(tied, expected)
        assert said.startswith("no difference (n = 3 vs 3: zero variance") and "direction" not in said
    across = verdict({"diff": 0.0, "ci95": 1.0, "n": (3, 3)}, -1)
    assert across == "inconclusive (no difference; the paper gives no effect size)"
    assert "*no difference* — a − b is 0" in _findings_legend()[0]


def test_the_similarity_curve_says_how_many_pairs_each_step_is_over(tmp_path):
    """The "over training" table averages each step over the pairs that logged it; a pair that stopped
    early left later steps over fewer pairs, under a row that read as the mean of all of them."""
    from embinit.reproduction.similarity import similarity_section
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = mlflow_store.ensure_experiment("early", uri)
    for seed in (1, 2, 3):
        sim = [(0, 0.1), (100, 0.3)] + ([(200, 0.5 + seed / 10)] if seed < 3 else [])   # seed 3 stopped early
        _trial(uri, exp, f"x{seed}", "multi30k", "Xavier", seed, {"test/bleu": 20.0}, {"val/loss": 3.0}, sim=sim)
    rep = Reproduction(uri, Inputs(groups=(Group("early", "multi30k", "GloVe", "GloVe", "a.yaml"),),
                                   analogy_experiment="none"))
    text = "\n".join(similarity_section(rep).lines)
    assert "| Xavier | 0.100 | 0.300 | 0.650 (n = 2) |" in text
    (row,) = rep.exports["similarity"]
    assert row["curve_n"] == {"0": 3, "100": 3, "200": 2} and row["end"]["n"] == 3


def test_the_similarity_interval_says_it_is_given_the_one_reference_seed(store):
    """Every pair of an init shares its one reference seed: the t interval over the pairs is for the mean
    similarity to that seed, not over reference seeds; the column and the text say so (the exports keep
    their keys)."""
    from embinit.reproduction.similarity import similarity_section
    _, _, rep, _ = store
    sec = similarity_section(rep)
    text = "\n".join(sec.lines)
    assert "| init | at init | end of training mean (σ) | n pairs | 95% CI (given the reference seed) |" in text
    assert "| n pairs | 95% CI |" not in text
    assert ("The pairs of an init all share its one reference seed, so they are not independent draws of two "
            "seeds") in text and "as a statement about the init it may be too narrow" in text
    assert set(rep.exports["similarity"][0]) == {"task", "init", "at_init", "end", "curve", "curve_n"}


def test_table1_rows_beside_the_papers(store):
    _, _, rep, _ = store
    rows = {(r["task"], r["init"]): r for r in rep.exports["table1"]}
    x = rows[("multi30k", "Xavier")]
    assert (x["mean"], x["std"], x["n"]) == (pytest.approx(21.0), pytest.approx(1.0), 3)
    assert x["ci95"] == pytest.approx(stats.t.ppf(0.975, 2) / math.sqrt(3))
    assert (x["paper_mean"], x["paper_std"], x["paper_epoch"]) == (37.3, 0.4, 11.7)
    assert rows[("multi30k", "GloVe_Shuffled")]["paper_mean"] is None     # not in the paper's Table 1
    # SST-2 accuracy in percent, matched to the paper's BERT rows (Xavier_P from Table 7)
    assert rows[("sst2", "MiniLM")]["mean"] == pytest.approx(81.0)
    assert rows[("sst2", "Xavier_MiniLM")]["paper_mean"] == 82.0
    # the ablation's cells are not main rows
    assert rows[("multi30k", "GloVe")]["n"] == 3


def test_table1_counts_seeds_as_the_report_does(store):
    """Table 1 counts one run per seed, the one `embinit report` counts (`records.stand_ins`): a seed that
    failed and then finished on a retry (under the same key, or under another, e.g. after a code version
    bump) is in n only; a diverged seed is in its own column. Before, `failed` counted every failed or
    diverged trial key of the role (here 3: seed 1's failed attempt under its older key, the diverged
    seed, the failed one) and there was no diverged column, while the report said n = 3, failed = 1,
    diverged = 1."""
    from embinit.report.table import build_report
    uri = store[0]
    exp = mlflow_store.ensure_experiment("retries", uri)

    def unfinished(key, seed, status):
        cfg = {"task": "multi30k", "init": "glove", "seed": seed, "d_model": 300, "heads": 10, "epochs": 20,
               "layers": 3, "batch_size": 64, "lr": 2e-4, "train_embeddings": True, "pos_encoding": True}
        run = trial_run.TrialRun.open(uri, exp, None, cfg, key, "GloVe", {"axes": {}, "point": {}})
        if status == "failed":
            run.fail("Traceback (most recent call last):\nRuntimeError: CUDA out of memory")
        else:
            run.finish({"status": "diverged", "history": [{"epoch": 1, "val/loss": float("nan")}], "best": {},
                        "best_epoch": 1, "diverged_step": 7}, [])

    _trial(uri, exp, "r0", "multi30k", "GloVe", 0, {"test/bleu": 15.0}, {"val/loss": 2.9})
    unfinished("r1-old", 1, "failed")                        # seed 1 failed under an older key ...
    _trial(uri, exp, "r1", "multi30k", "GloVe", 1, {"test/bleu": 16.0}, {"val/loss": 2.8})   # ... then finished
    unfinished("r2", 2, "failed")                            # seed 2 failed, retried under its key
    _trial(uri, exp, "r2", "multi30k", "GloVe", 2, {"test/bleu": 17.0}, {"val/loss": 2.7})
    unfinished("r3", 3, "diverged")
    unfinished("r4", 4, "failed")
    rep = Reproduction(uri, Inputs(groups=(Group("retries", "multi30k", "GloVe", "GloVe", "r.yaml"),),
                                   analogy_experiment="none"))
    text = render(rep, rep.build())
    (row,) = [r for r in rep.exports["table1"] if r["init"] == "GloVe"]
    (reported,) = [r for r in build_report("retries", uri).rows if r["metric"] == "test/bleu"]
    assert (row["n"], row["failed"], row["diverged"]) == (3, 1, 1)
    assert (reported["n"], reported["failed"], reported["diverged"]) == (3, 1, 1)
    assert row["mean"] == pytest.approx(reported["mean"]) == pytest.approx(16.0)
    assert "| 3 | [" in text and "| 1 | 1 |" in text


def _diverged(uri, exp, key, label, seed, *, te=True, pe=True):
    """A multi30k trial of the paper's schedule that diverged: no test value, no best validation loss."""
    cfg = {"task": "multi30k", "init": label.lower(), "seed": seed, "d_model": 300, "heads": 10, "epochs": 20,
           "layers": 3, "batch_size": 64, "lr": 2e-4, "train_embeddings": te, "pos_encoding": pe}
    run = trial_run.TrialRun.open(uri, exp, None, cfg, key, label, {"axes": {}, "point": {}})
    run.finish({"status": "diverged", "history": [{"epoch": 1, "val/loss": float("nan")}], "best": {},
                "best_epoch": 1, "diverged_step": 7}, [])


def test_table3_counts_seeds_as_table1_does(store):
    """Table 3 counts one run per seed of a cell, the one Table 1 and `embinit report` count
    (`records.stand_ins`): a seed trained again under a new key (e.g. the spec rerun with more epochs)
    counts once, by its newer run, so the trainable + PE cell's n is Table 1's. Before, each finished
    trial key counted: that cell said n = 4 (seed 1 twice) beside Table 1's 3, and a diverged seed was
    nowhere."""
    uri = store[0]
    exp = mlflow_store.ensure_experiment("t3-reruns", uri)
    for seed, v in enumerate([15.0, 16.0, 17.0]):
        _trial(uri, exp, f"g{seed}", "multi30k", "GloVe", seed, {"test/bleu": v}, {"val/loss": 3.0 - v / 100},
               sim=[(0, 1.0), (100, 0.1 * seed + 0.1)] if seed else None)
    _trial(uri, exp, "g1-more-epochs", "multi30k", "GloVe", 1, {"test/bleu": 18.0}, {"val/loss": 2.8},
           sim=[(0, 1.0), (100, 0.5)])
    _trial(uri, exp, "gfp0", "multi30k", "GloVe", 0, {"test/bleu": 12.0}, {"val/loss": 4.0}, te=False)
    _trial(uri, exp, "gfp0-more-epochs", "multi30k", "GloVe", 0, {"test/bleu": 13.0}, {"val/loss": 3.9}, te=False)
    _trial(uri, exp, "gff0", "multi30k", "GloVe", 0, {"test/bleu": 10.0}, {"val/loss": 4.2}, te=False, pe=False)
    _diverged(uri, exp, "gff1", "GloVe", 1, te=False, pe=False)
    rep = Reproduction(uri, Inputs(groups=(Group("t3-reruns", "multi30k", "GloVe", "GloVe", "r.yaml"),),
                                   analogy_experiment="none"))
    text = render(rep, rep.build())
    (t1,) = [r for r in rep.exports["table1"] if r["init"] == "GloVe"]
    cells = {(r["init"], r["train_embeddings"], r["pos_encoding"]): r for r in rep.exports["table3"]}
    main_cell = cells[("GloVe", True, True)]
    assert main_cell["bleu"]["n"] == t1["n"] == 3 and main_cell["seeds"] == [0, 1, 2]
    assert main_cell["bleu"]["mean"] == pytest.approx(t1["mean"]) == pytest.approx((15.0 + 18.0 + 17.0) / 3)
    assert sorted(main_cell["runs"]) == sorted(t1["runs"])
    frozen = cells[("GloVe", False, True)]
    assert (frozen["bleu"]["n"], frozen["bleu"]["mean"], frozen["seeds"]) == (1, 13.0, [0])
    bare = cells[("GloVe", False, False)]
    assert (bare["bleu"]["n"], bare["failed"], bare["diverged"]) == (1, 0, 1)
    table3 = text[text.index("## Table 3"):]
    assert "| GloVe | no/no |" in table3 and "| 1 | — | 0 | 1 |" in table3
    # the KNN similarity between seeds counts the same runs: seed 1's pair once, by its newer run
    (sim,) = [r for r in rep.exports["similarity"] if r["init"] == "GloVe"]
    assert sim["end"]["n"] == 2 and sim["end"]["mean"] == pytest.approx((0.5 + 0.3) / 2)
    assert "n = the seeds whose run finished with a value, failed and diverged = the seeds" in table3


def test_a_finding_favouring_a_side_that_lost_seeds_to_divergence_is_inconclusive(store):
    """The findings qualify a verdict for diverged seeds by the report's rule (`comparison.divergence_rule`):
    Xavier diverged on seed 3, so "raw GloVe does worse than Xavier", which its 3 survivors reproduce,
    reads inconclusive with the note (as the report calls GloVe's row against Xavier inconclusive), while
    "GloVe_Xavier gains over Xavier", a verdict against the diverging side, stands with the note. Before,
    both read "reproduces" and the lost seed was not mentioned."""
    from embinit.report.table import build_report
    uri = store[0]
    exp = mlflow_store.ensure_experiment("f-diverged", uri)
    xavier = [30.0, 31.2, 31.9]
    for seed, v in enumerate(xavier):
        _trial(uri, exp, f"x{seed}", "multi30k", "Xavier", seed, {"test/bleu": v}, {"val/loss": 3.0 - v / 100})
    _diverged(uri, exp, "x3", "Xavier", 3)
    for label, shift in (("GloVe", [-5.0, -4.7, -5.2, 26.0]), ("GloVe_Xavier", [2.1, 1.8, 2.3, 33.0])):
        for seed, d in enumerate(shift):
            v = xavier[seed] + d if seed < 3 else d
            _trial(uri, exp, f"{label}{seed}", "multi30k", label, seed, {"test/bleu": v}, {"val/loss": 3.0 - v / 100})
    rep = Reproduction(uri, Inputs(groups=(Group("f-diverged", "multi30k", "GloVe", "GloVe", "r.yaml"),),
                                   analogy_experiment="none"))
    text = render(rep, rep.build())
    f = {x["claim"].split(" (")[0]: x for x in rep.exports["findings"] if "verdict" in x}
    raw = f["raw GloVe does worse than Xavier"]
    assert (raw["verdict"], raw["survivor_verdict"], raw["diverged"]) == ("inconclusive", "reproduces", [0, 1])
    assert raw["note"] == "Xavier diverged on 1 of 4 seeds; on the survivors: reproduces"
    assert raw["loss"]["verdict"] == "inconclusive" and raw["loss"]["survivor_verdict"] == "reproduces"
    assert ("raw GloVe does worse than Xavier (multi30k): test BLEU **inconclusive** (Xavier diverged on 1 of 4 "
            "seeds; on the survivors: reproduces).") in text
    gains = f["GloVe_Xavier gains over Xavier"]
    assert (gains["verdict"], gains["survivor_verdict"], gains["diverged"]) == ("reproduces", "reproduces", [0, 1])
    assert gains["note"] == "Xavier diverged on 1 of 4 seeds"
    assert "test BLEU **reproduces** (Xavier diverged on 1 of 4 seeds)." in text
    assert "A side that lost seeds to divergence is not called better on its survivors alone" in text
    # the report says the same of GloVe against Xavier, by the same rule
    (glove,) = [r for r in build_report("f-diverged", uri).rows if r["init"] == "GloVe" and r["metric"] == "test/bleu"]
    c = glove["vs_baseline"]
    assert (c["verdict"], c["survivor_verdict"], c["diverged"]) == ("inconclusive", "worse", [0, 1])
    assert c["note"] == "Xavier diverged on 1 of 4 seeds; on the survivors: worse"


def _diverged_sst2(uri, exp, key, label, seed):
    """An SST-2 trial of the paper's schedule that diverged."""
    cfg = {"task": "sst2", "init": label.lower(), "seed": seed, "d_model": 768, "heads": 8, "epochs": 5,
           "layers": 3, "batch_size": 64, "lr": 2e-4, "train_embeddings": True, "pos_encoding": True}
    run = trial_run.TrialRun.open(uri, exp, None, cfg, key, label, {"axes": {}, "point": {}})
    run.finish({"status": "diverged", "history": [{"epoch": 1, "val/loss": float("nan")}], "best": {},
                "best_epoch": 1, "diverged_step": 7}, [])


@pytest.mark.parametrize("lost", ["claim side", "other side"])
def test_on_par_and_not_reproduced_verdicts_resting_on_a_side_that_lost_seeds_are_inconclusive(store, lost):
    """An interval across 0 speaks for a side too: "on par" grants the claim's side that it is no worse,
    "does not reproduce" grants the other side that the claim's side is not better. Either reading rests
    on the survivors of the side it speaks for, so when that side lost seeds to divergence it reads
    inconclusive; lost by the side it speaks against, it stands with the note. Before, both stood either
    way (the interval favours neither side, so `divergence_rule` saw nothing to set aside)."""
    uri = store[0]
    exp_m = mlflow_store.ensure_experiment(f"par-m-{lost[0]}", uri)
    exp_s = mlflow_store.ensure_experiment(f"par-s-{lost[0]}", uri)
    xavier_bleu, xavier_acc = [30.0, 31.2, 31.9], [0.80, 0.81, 0.82]
    near = [0.1, -0.1, 0.2]   # differences: mean 0.067, paired 95% interval ±0.38, far inside both paper effects
    for seed in range(3):
        _trial(uri, exp_m, f"x{seed}", "multi30k", "Xavier", seed, {"test/bleu": xavier_bleu[seed]}, {"val/loss": 3.0})
        _trial(uri, exp_m, f"g{seed}", "multi30k", "GloVe", seed, {"test/bleu": xavier_bleu[seed] + near[seed]},
               {"val/loss": 3.0})
        _trial(uri, exp_s, f"x{seed}", "sst2", "Xavier", seed, {}, {"val/acc": xavier_acc[seed], "val/loss": 0.4})
        _trial(uri, exp_s, f"m{seed}", "sst2", "MiniLM", seed, {}, {"val/acc": xavier_acc[seed] + near[seed] / 100,
                                                                    "val/loss": 0.4})
    # seed 3 diverged on GloVe / MiniLM (the claims' a side) or on Xavier (their b side)
    _diverged(uri, exp_m, "d3", "GloVe" if lost == "claim side" else "Xavier", 3)
    _diverged_sst2(uri, exp_s, "d3", "MiniLM" if lost == "claim side" else "Xavier", 3)
    rep = Reproduction(uri, Inputs(groups=(Group(f"par-m-{lost[0]}", "multi30k", "GloVe", "GloVe", "m.yaml"),
                                           Group(f"par-s-{lost[0]}", "sst2", "MiniLM", "BERT", "s.yaml")),
                                   analogy_experiment="none"))
    text = render(rep, rep.build())
    assert "*on par* for the claim's side (it is no worse), *does not reproduce* for the other" in text
    f = {x["claim"].split(" (")[0]: x for x in rep.exports["findings"] if "verdict" in x}
    # "raw GloVe does worse than Xavier" (paper: -3.2 BLEU): the interval excludes that, so not reproduced,
    # which speaks for GloVe (it is not worse): resting on GloVe's survivors when GloVe lost a seed
    raw = f["raw GloVe does worse than Xavier"]
    assert raw["survivor_verdict"].startswith("does not reproduce"), raw
    # "MiniLM ... does on par or better than Xavier" (paper +1.8 points): on par, which speaks for MiniLM
    par = f["MiniLM, with a σ close to Xavier's, does on par or better than Xavier"]
    assert par["survivor_verdict"].startswith("reproduces (on par"), par
    if lost == "claim side":
        assert (raw["verdict"], raw["diverged"]) == ("inconclusive", [1, 0])
        assert raw["note"] == "GloVe diverged on 1 of 4 seeds; on the survivors: " + raw["survivor_verdict"]
        assert (par["verdict"], par["diverged"]) == ("inconclusive", [1, 0])
        assert par["note"].startswith("MiniLM diverged on 1 of 4 seeds; on the survivors: reproduces (on par")
    else:   # Xavier's lost seed could only make Xavier worse: neither reading rests on it
        assert (raw["verdict"], raw["diverged"]) == (raw["survivor_verdict"], [0, 1])
        assert (par["verdict"], par["diverged"]) == (par["survivor_verdict"], [0, 1])
        assert par["note"] == "Xavier diverged on 1 of 4 seeds"


def test_findings_carry_p_values_and_holms_adjustment_over_the_comparisons_with_one_baseline(store):
    """The findings read each claim's 95% interval alone, where the report adjusts its comparisons for
    multiplicity (Holm over those with one baseline on one task and metric). Each comparison now has its
    p, Holm's over its family (same b, task and metric) and `holds_after_holm`; a reproduces/contradicts
    that does not survive is marked as the report marks it. Here GloVe_Xavier and GloVe_Shuffled each
    reproduce their claim against GloVe alone (p 0.036 and 0.045) but not as two tests (Holm 0.073)."""
    from embinit.comparison import holm
    uri = store[0]
    exp = mlflow_store.ensure_experiment("f-holm", uri)
    glove = [20.0, 21.0, 22.0]
    shifts = {"GloVe": [0.0, 0.0, 0.0], "Xavier": [5.0, 4.7, 5.3], "GloVe_Xavier": [1.0, 1.4, 0.7],
              "GloVe_Shuffled": [-1.0, -1.5, -0.7]}
    values = {label: {seed: glove[seed] + d for seed, d in enumerate(shift)} for label, shift in shifts.items()}
    for label, by_seed in values.items():
        for seed, v in by_seed.items():
            _trial(uri, exp, f"{label}{seed}", "multi30k", label, seed, {"test/bleu": v}, {"val/loss": 3.0 - v / 100})
    rep = Reproduction(uri, Inputs(groups=(Group("f-holm", "multi30k", "GloVe", "GloVe", "h.yaml"),),
                                   analogy_experiment="none"))
    text = render(rep, rep.build())
    f = {(x["a"], x["b"]): x for x in rep.exports["findings"] if "b" in x}

    def p(a, b):
        return stats.ttest_rel(list(values[a].values()), list(values[b].values())).pvalue

    std, shuffled = f["GloVe_Xavier", "GloVe"], f["GloVe_Shuffled", "GloVe"]
    assert std["p"] == pytest.approx(p("GloVe_Xavier", "GloVe"), rel=1e-9)
    assert shuffled["p"] == pytest.approx(p("GloVe_Shuffled", "GloVe"), rel=1e-9)
    assert std["p"] < 0.05 and shuffled["p"] < 0.05   # each alone: its interval excludes 0
    # the family against GloVe: these two (the elements-shuffled table has no runs, so no test); against
    # Xavier another family, whose two verdicts hold
    assert [std["p_holm"], shuffled["p_holm"]] == pytest.approx(holm([std["p"], shuffled["p"]]))
    assert std["p_holm"] == pytest.approx(0.0728, abs=1e-3) and std["holm_m"] == shuffled["holm_m"] == 2
    for x in (std, shuffled):
        assert (x["verdict"], x["holds_after_holm"]) == ("reproduces", False)
        assert (x["loss"]["verdict"], x["loss"]["holds_after_holm"], x["loss"]["holm_m"]) == ("reproduces", False, 2)
    raw, gains = f["GloVe", "Xavier"], f["GloVe_Xavier", "Xavier"]
    assert (raw["verdict"], raw["holds_after_holm"], raw["holm_m"]) == ("reproduces", True, 2)
    assert (gains["verdict"], gains["holds_after_holm"]) == ("contradicts", True)
    assert f["GloVe_ShuffledElements", "GloVe"]["holds_after_holm"] is None   # not measured: no test
    assert ("standardizing GloVe to Xavier's σ helps (multi30k): test BLEU **reproduces** (not after Holm, m=2). "
            "GloVe_Xavier − GloVe = 1.03 (paired t, 95% CI [") in text
    assert f"n = 3 vs 3), p = {std['p']:.3g} (Holm {std['p_holm']:.3g}, m = 2); paper 4.60." in text
    assert "raw GloVe does worse than Xavier (multi30k): test BLEU **reproduces**. GloVe − Xavier" in text
    assert "Holm's adjustment over the m comparisons with the same b on the same task and metric" in text


def test_table3_cells_from_configs(store):
    _, _, rep, _ = store
    cells = {(r["init"], r["train_embeddings"], r["pos_encoding"]): r for r in rep.exports["table3"]}
    assert cells[("GloVe", False, False)]["bleu"]["mean"] == 12.0
    assert cells[("GloVe", False, True)]["bleu"]["mean"] == 17.0
    assert cells[("GloVe", True, True)]["bleu"]["n"] == 3 and cells[("GloVe", True, True)]["seeds"] == [0, 1, 2]
    assert cells[("Xavier", True, True)]["paper"] == [1.61, 11.67, 37.3, 0.42]


def test_findings_verdicts(store):
    _, _, rep, sections = store
    f = {(x["finding"], x["claim"].split(" (")[0]): x for x in rep.exports["findings"] if "verdict" in x}
    raw = f[("1", "raw GloVe does worse than Xavier")]
    # seeds 0..2 on both sides: paired differences (-5 each) have no spread: no interval, no verdict
    assert raw["test"] == "paired t" and raw["diff"] == pytest.approx(-5.0)
    assert raw["verdict"] == "same direction (n = 3 vs 3: zero variance: the 3 paired differences are identical)"
    assert raw["paper_effect"] == pytest.approx(34.1 - 37.3)
    # the same claim on the best validation loss (lower is better), with the paper's Table-3 difference
    assert raw["loss"]["diff"] == pytest.approx(0.05) and raw["loss"]["verdict"].startswith("same direction (")
    assert raw["loss"]["paper_effect"] == pytest.approx(1.62 - 1.61) and not raw["disagree"]
    assert f[("1", "standardizing GloVe to Xavier's σ helps")]["verdict"] == "reproduces"
    assert f[("1", "standardizing MiniLM is neutral or worse")]["verdict"] == "reproduces"
    shuffled = next(x for x in rep.exports["findings"] if x.get("a") == "GloVe_Shuffled" and x["task"] == "multi30k")
    assert shuffled["verdict"].startswith("inconclusive") and shuffled["paper_effect"] is None
    elements = next(x for x in rep.exports["findings"] if x.get("a") == "GloVe_ShuffledElements")
    assert elements["verdict"] == "not measured" and "(elements;" in elements["claim"]
    # MiniLM − Xavier: differences 0, +1, -1 -> the interval (±2.5) is wider than the paper's 1.8
    assert f[("1", "MiniLM, with a σ close to Xavier's, does on par or better than Xavier")]["verdict"] \
        .startswith("inconclusive")
    # Finding 3's gain of the standardized source over Xavier is the paper's claim for GloVe; for a source
    # close to Xavier's σ (BERT, MiniLM) the paper finds standardizing neutral or negative: on par suffices
    assert ("3", "GloVe_Xavier gains over Xavier") in f and ("3", "MiniLM_Xavier gains over Xavier") not in f
    assert ("3", "MiniLM_Xavier does on par or better than Xavier") in f
    # Table 3: PE gain with trainable embeddings = yes/yes (seeds 0-2) - yes/no (seed 0 only): paired on
    # the one shared seed (seed 0: 20 - 11, 15 - 13, 21 - 12), without an interval (one pair)
    gains = next(x for x in rep.exports["findings"] if x.get("claim", "").startswith("PE gain"))
    assert gains["values"] == {"Xavier": pytest.approx(9.0), "P": pytest.approx(2.0),
                               "P_Xavier": pytest.approx(9.0)}
    assert gains["intervals"]["P"]["test"] == "paired t" and gains["intervals"]["P"]["pairs"] == 1
    assert gains["intervals"]["P"]["ci95"] is None and gains["verdict"] == "reproduces"
    text = render(rep, sections)
    assert "GloVe − Xavier = -5.00 (paired t, no interval: zero variance" in text and "**Finding 2.**" in text


def test_bleu_and_loss_disagreement_is_marked(store):
    uri = store[0]
    exp = mlflow_store.ensure_experiment("disagree", uri)
    for seed in range(3):   # GloVe_Xavier: better BLEU than GloVe, but a worse loss, on every seed
        _trial(uri, exp, f"dg{seed}", "multi30k", "GloVe", seed, {"test/bleu": 10.0 + seed}, {"val/loss": 2.0 + seed})
        _trial(uri, exp, f"dx{seed}", "multi30k", "GloVe_Xavier", seed, {"test/bleu": 15.0 + 1.1 * seed},
               {"val/loss": 2.5 + 1.1 * seed})
    rep = Reproduction(uri, Inputs(groups=(Group("disagree", "multi30k", "GloVe", "GloVe", "d.yaml"),),
                                   analogy_experiment="none"))
    text = render(rep, rep.build())
    x = next(x for x in rep.exports["findings"] if x["claim"].startswith("standardizing GloVe"))
    assert x["verdict"] == "reproduces" and x["loss"]["verdict"] == "contradicts" and x["disagree"]
    assert "**BLEU and loss disagree.**" in text


def test_similarity_and_table4(store):
    _, _, rep, sections = store
    sim = {r["init"]: r for r in rep.exports["similarity"]}
    assert sim["GloVe"]["at_init"]["mean"] == 1.0 and sim["GloVe"]["end"]["mean"] == pytest.approx(0.35)
    assert sim["GloVe"]["end"]["n"] == 2 and "Xavier" in sim
    t4 = {r["row"]: r for r in rep.exports["table4"]}
    assert t4["GloVe & Pos. Enc."]["mean"] == pytest.approx(2.5) and t4["GloVe & Pos. Enc."]["n"] == 2
    assert t4["GloVe & Pos. Enc."]["correct"] in ([2, 3], [3, 2])
    text = render(rep, sections)
    assert "| GloVe & Pos. Enc. | 1424/1631 (87.3) | 2–3/100 |" in text
    # the Table-4 evidence: σ(words)/σ(PE) per row (mean over the seeds), the paper's rows and the sweep
    assert t4["GloVe & Pos. Enc."]["pe_ratio"] == pytest.approx(1.5) and t4["GloVe"]["pe_ratio"] is None
    ratio = rep.exports["table4_ratio"]
    assert ratio["paper"][0]["ratio"] == pytest.approx(0.37 / 0.67) and ratio["paper"][1]["ratio"] == \
        pytest.approx(0.016 / 0.67)
    assert [(r["ratio"], r["mean"], r["n"]) for r in ratio["here"]] == [(0.1, pytest.approx(1.5), 2),
                                                                       (10.0, pytest.approx(59.0), 2)]
    assert "| 10 | 59.0 (0.0) | 2 |" in text


def test_exports_and_cli(store, tmp_path, capsys):
    uri, inputs, rep, _ = store
    paths = write_exports(rep, tmp_path / "exp")
    data = json.loads((tmp_path / "exp" / "reproduction.json").read_text())
    assert set(data) >= {"table1", "table2", "table3", "table4", "similarity", "findings"}
    with open(tmp_path / "exp" / "table1.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 10 and {"task", "init", "mean", "std", "n", "ci_low", "ci_high", "paper_mean"} <= set(rows[0])
    # review C6: the CSV names the half-width as unclipped (the interval is ci_low, ci_high); JSON keeps ci95
    assert "ci95" not in rows[0] and "ci95_half_width_unclipped" in rows[0] and "ci95" in data["table1"][0]
    assert all(p.exists() for p in paths)
    # the CLI reads the GPU experiment names by default: a store without any is a clear error, not a
    # traceback; the superseded CPU names with --inputs offline
    with pytest.raises(EmbinitError, match="no MLflow experiment 'offline-multi30k-glove50'"):
        Reproduction(uri)
    assert main(["reproduction", "--tracking-uri", uri]) == 2
    assert "gpu-multi30k-glove50" in capsys.readouterr().err
    assert main(["reproduction", "--tracking-uri", uri, "--inputs", "offline"]) == 2
    assert "offline-multi30k-glove50" in capsys.readouterr().err


def test_a_partial_store_renders_what_ran(store, tmp_path, capsys):
    """A GPU run stopped between batches: the experiments not run yet are listed as such, the rest renders."""
    uri = store[0]
    exp = mlflow_store.ensure_experiment("gpu-sst2-minilm", uri)
    for seed in range(2):
        _trial(uri, exp, f"p{seed}", "sst2", "Xavier", seed, {}, {"val/acc": 0.8, "val/loss": 0.4})
    out = tmp_path / "repro.md"
    assert main(["reproduction", "--tracking-uri", uri, "--out", str(out), "--exports", str(tmp_path / "x")]) == 0
    text = out.read_text()
    assert "no trials in `gpu-multi30k-glove50` yet" in text and "| Xavier | 81.5 (1.0) |" in text


def test_intervals_are_clipped_to_the_metrics_range(store):
    """Issue 16 item 6: a widely spread BLEU (1, 2, 30) or accuracy (70%, 90%, 99%) has a t interval that
    leaves [0, 100]; the reproduction's tables show it clipped, as the report does."""
    uri = store[0]
    wide = mlflow_store.ensure_experiment("wide", uri)
    for seed, v in enumerate((1.0, 2.0, 30.0)):
        _trial(uri, wide, f"w{seed}", "multi30k", "Xavier", seed, {"test/bleu": v}, {"val/loss": 0.05 + seed})
    wide_sst = mlflow_store.ensure_experiment("wide-sst", uri)
    for seed, v in enumerate((0.7, 0.9, 0.99)):
        _trial(uri, wide_sst, f"ws{seed}", "sst2", "Xavier", seed, {}, {"val/acc": v, "val/loss": 0.4})
    inputs = Inputs(groups=(Group("wide", "multi30k", "GloVe", "GloVe", "w.yaml"),
                            Group("wide-sst", "sst2", "MiniLM", "BERT", "s.yaml")), analogy_experiment="none")
    rep = Reproduction(uri, inputs)
    text = render(rep, rep.build())
    rows = {r["task"]: r for r in rep.exports["table1"] if r["init"] == "Xavier"}
    bleu, acc = rows["multi30k"], rows["sst2"]
    assert bleu["mean"] - bleu["ci95"] < 0 and bleu["ci_low"] == 0.0 and bleu["ci_high"] < 100
    assert acc["mean"] + acc["ci95"] > 100 and acc["ci_high"] == 100.0 and acc["ci_low"] > 0
    assert f"[0.00, {bleu['ci_high']:.2f}]" in text and f"[{acc['ci_low']:.2f}, 100.00]" in text
    table3 = {r["init"]: r for r in rep.exports["table3"] if r["train_embeddings"] and r["pos_encoding"]}
    assert table3["Xavier"]["bleu"]["ci_low"] == 0.0


def test_the_findings_section_needs_no_other_section_first(store):
    """Finding 2 (b) reads Table 4's rows from the runs, not from what the Table-4 section exported: on a
    fresh Reproduction the findings section alone says what it says in the built document."""
    uri, inputs, _, sections = store
    built = next(s for s in sections if s.title.startswith("The paper's three findings"))
    alone = findings_section(Reproduction(uri, inputs))
    assert alone.lines == built.lines and any("(b) Table 4" in line for line in alone.lines)


def test_an_xavier_only_group_names_no_pretrained_source(store):
    """tune_configs/gpu/multi30k_xavier300.yaml trains Xavier alone at the paper's setting: its block
    is headed as the paper's Xavier row, and its settings name no source (not "GloVe **(differs)**"),
    while a group with a pretrained init keeps its source's heading."""
    uri = store[0]
    exp = mlflow_store.ensure_experiment("x300", uri)
    for seed, v in enumerate((35.0, 36.0, 34.0)):
        _trial(uri, exp, f"x{seed}", "multi30k", "Xavier", seed, {"test/bleu": v}, {"val/loss": 1.6})
    rep = Reproduction(uri, Inputs(groups=(Group("x300", "multi30k", "GloVe", "GloVe", "x.yaml"),
                                           Group("m30", "multi30k", "GloVe", "GloVe", "a.yaml")),
                                   analogy_experiment="none"))
    text = render(rep, rep.build())
    assert "**multi30k, Xavier only (paper: the Xavier row of its GloVe block); test BLEU" in text
    assert "**multi30k, GloVe (paper: GloVe); test BLEU" in text                  # the GloVe group's
    assert "| multi30k / GloVe | source | GloVe 300d | none (Xavier only) |" in text
    (row,) = [r for r in rep.exports["table1"] if r["init"] == "Xavier" and r["mean"] == pytest.approx(35.0)]
    assert row["n"] == 3


def test_table2s_paper_columns_name_their_table_and_the_text_agrees(store):
    """Table 2 and Table 6 print the Multi30k GloVe block differently (GloVe_Xavier: -0.12, 0.26 in Table 2,
    -0.17, 0.20 in Table 6). Before, the section's paper columns were unlabelled Table-2 and Table-6 ones
    side by side, and its text quoted Table 6's Xavier range ±0.027 beside a column showing Table 2's
    -0.03, 0.03."""
    _, _, rep, sections = store
    text = render(rep, sections)
    table2 = text[text.index("## Table 2"):text.index("## Table 3")]
    assert ("| group | init | min, max | mean (σ) | paper Table 2 min, max | paper Table 2 mean (σ) | "
            "paper Table 6 min, max | scaled min, max | scaled σ | paper Table 6 scaled σ |") in table2
    glove_xavier = next(ln for ln in table2.splitlines() if ln.startswith("| multi30k | GloVe_Xavier |"))
    assert "| -0.12, 0.26 | 0.0 (0.02) | -0.17, 0.2 |" in glove_xavier and glove_xavier.count("| 0.27 |") == 1
    xavier = next(ln for ln in table2.splitlines() if ln.startswith("| multi30k | Xavier |"))
    assert "| -0.03, 0.03 | 0.0 (0.02) | -0.027, 0.027 |" in xavier
    assert "its Xavier range from a 5,893 × 300 layer" in table2 and "±0.027" in table2
    assert "(Table 2 -0.12, 0.26; Table 6 -0.17, 0.2)" in table2
    sst = next(ln for ln in table2.splitlines() if ln.startswith("| sst2 | Xavier |"))
    assert "| -0.02, 0.02 | 0.0 (0.01) | — |" in sst   # Table 6 is the Multi30k GloVe setting's only
    (row,) = [r for r in rep.exports["table2"] if r["task"] == "multi30k" and r["role"] == "P_Xavier"]
    assert (row["paper"][:2], row["paper_table6"][:2], row["paper_scaled_std"]) == ([-0.12, 0.26], [-0.17, 0.2], 0.27)


def test_the_json_export_carries_the_per_seed_values_of_every_interval(store, tmp_path):
    """Review M6: reproduction.json held only run ids, so its intervals could not be recomputed from the
    repository. Each summary and comparison now carries its per-seed values (seed -> value, run id): the
    intervals recomputed from them are the exported ones."""
    from embinit.comparison import paired as paired_t
    from embinit.report.table import summarize as summary
    _, _, rep, _ = store
    write_exports(rep, tmp_path / "m6")
    data = json.loads((tmp_path / "m6" / "reproduction.json").read_text())

    def again(per_seed, bounds):
        return summary([v["value"] for v in per_seed.values()], bounds)
    checked = 0
    for row in data["table1"]:
        bounds = rep.bounds(row["task"])
        assert set(row["runs"]) == {v["run_id"] for v in row["per_seed"].values()}
        st = again(row["per_seed"], bounds)
        for k in ("n", "mean", "std", "ci_low", "ci_high"):
            assert st[k] == pytest.approx(row[k]), (row["init"], k)
        checked += row["n"] >= 2
    for row in data["table3"]:
        for part, bounds in (("bleu", (0.0, 100.0)), ("val_loss", (0.0, math.inf))):
            st = again(row[part]["per_seed"], bounds)
            assert (st["n"], st["mean"], st["ci_low"]) == (row[part]["n"], pytest.approx(row[part]["mean"]),
                                                          pytest.approx(row[part]["ci_low"]))
    for f in [f for f in data["findings"] if "loss" in f]:   # finding 2 (a)'s intervals: Table 3's cells
        for c in (f, f["loss"]):
            values = {side: {s: v["value"] for s, v in c["per_seed"][side].items()} for side in ("a", "b")}
            got = paired_t(values["a"], values["b"])
            assert (got["diff"], got["ci95"], got["p"]) == (pytest.approx(c["diff"]), pytest.approx(c["ci95"]),
                                                            pytest.approx(c["p"])), f["claim"]
            checked += c["ci95"] is not None
    for row in data["table4"]:
        st = again(row["per_seed"], (0.0, 100.0))
        assert (st["n"], st["mean"]) == (row["n"], pytest.approx(row["mean"]))
        assert sorted(v["correct"] for v in row["per_seed"].values()) == sorted(row["correct"])
    # the KNN similarity's summaries at init and at the end: their seeds' runs are Table 1's
    runs = {(r["task"], r["init"], s): v["run_id"] for r in data["table1"] for s, v in r["per_seed"].items()}
    sim_checked = 0
    for row in data["similarity"]:
        for when in ("at_init", "end"):
            st = again(row[when]["per_seed"], metric_range("sim/knn_jaccard_mean"))
            for k in ("n", "mean", "std", "ci_low", "ci_high"):
                assert st[k] == pytest.approx(row[when][k]), (row["init"], when, k)
            assert all(v["run_id"] == runs[row["task"], row["init"], s] for s, v in row[when]["per_seed"].items())
            sim_checked += row[when]["n"] >= 2
    assert sim_checked >= 4
    assert checked > 5   # intervals were there to recompute
    # the studies beyond the paper: each cell's summary from its seeds' values, each value its seed's
    # run's (the newest where a seed ran twice), so the paired contrasts can be recomputed by seed
    from embinit.reproduction.inputs import load_trials
    uri = rep.uri
    for name, exp, match in (("dose_response", "dose", lambda t, r: t.label == r["source"]
                              and t.axes.get("sigma") == r["sigma"]),
                             ("oov_rules", "oov", lambda t, r: t.config.get("oov") == r["rule"])):
        by_id = {t.run_id: t for t in load_trials(exp, uri)[0]}
        assert data[name]
        for row in data[name]:
            per_seed = row["per_seed"]
            v = [x["value"] for x in per_seed.values()]
            assert (len(v), min(v), max(v)) == (row["n"], row["min"], row["max"]) and row["n"] == 3
            assert (statistics.fmean(v), statistics.stdev(v)) == (pytest.approx(row["mean"]), pytest.approx(row["std"]))
            for seed, x in per_seed.items():
                t = by_id[x["run_id"]]
                assert (str(t.seed), t.metrics[row["metric"]], match(t, row)) == (seed, x["value"], True)
    (cell,) = [r for r in data["dose_response"] if (r["metric"], r["source"], r["sigma"]) == ("best/val/loss",
                                                                                              "GloVe", "1x")]
    assert cell["per_seed"]["0"]["value"] == 3.5   # the newer of seed 0's two runs
    # the paired contrasts the studies' sections show: recomputed from the cells' per_seed values, paired by
    # seed (paired t, 95%), Holm's adjustment over each metric's contrasts (one family per section and metric)
    for name, rows_of, key in (("dose_response_contrasts", "dose_response", lambda r, side: (r["metric"], r[side],
                                                                                               r["sigma"])),
                               ("oov_rules_contrasts", "oov_rules", lambda r, side: (r["metric"], r[side]))):
        cells = {(r["metric"], r["source"], r["sigma"]) if "source" in r else (r["metric"], r["rule"]): r["per_seed"]
                 for r in data[rows_of]}
        families: dict[str, list] = {}
        for c in data[name]:
            a, b = cells[key(c, "a")], cells[key(c, "b")]
            assert c["per_seed"] == {"a": a, "b": b}
            seeds = sorted(set(a) & set(b), key=str)
            assert c["seeds"] == seeds and c["pairs"] == len(seeds) == 3 and c["n"] == [len(a), len(b)]
            diffs = [a[s]["value"] - b[s]["value"] for s in seeds]
            d = statistics.fmean(diffs)
            assert c["diff"] == pytest.approx(d) and c["test"] == "paired t"
            if max(diffs) - min(diffs) < 1e-9:   # identical differences (GloVe at 1x is 0.1 above its shuffle)
                assert (c["ci95"], c["ci_low"], c["p"], c["p_holm"]) == (None, None, None, None)
                assert c["reason"].startswith("zero variance") and c["verdict"] == "inconclusive"
                continue
            se = statistics.stdev(diffs) / math.sqrt(len(diffs))
            half = stats.t.ppf(0.975, len(diffs) - 1) * se
            p = 2 * stats.t.sf(abs(d / se), len(diffs) - 1)
            assert (c["ci95"], c["ci_low"], c["ci_high"], c["p"]) == (
                pytest.approx(half), pytest.approx(d - half), pytest.approx(d + half),
                pytest.approx(p)), (name, c["metric"], c["a"], c["b"])
            assert c["verdict"] == ("better" if (d - half > 0) == ("loss" not in c["metric"]) else "worse") \
                if d - half > 0 or d + half < 0 else "inconclusive"
            families.setdefault(c["metric"], []).append(c)
        assert families
        for metric, fam in families.items():   # Holm's step-down over the family's tests, by hand
            order = sorted(range(len(fam)), key=lambda i: fam[i]["p"])
            running = 0.0
            for k, i in enumerate(order):
                running = max(running, min(1.0, (len(fam) - k) * fam[i]["p"]))
                assert (fam[i]["p_holm"], fam[i]["holm_m"]) == (pytest.approx(running), len(fam)), (name, metric)
                assert fam[i]["holds_after_holm"] == ((running < 0.05) if fam[i]["verdict"] != "inconclusive" else None)
    # as many as the document shows: 3 pairs x 2 sigmas per dose metric, `focus` − `xavier` per OOV metric
    assert (len(data["dose_response_contrasts"]), len(data["oov_rules_contrasts"])) == (18, 6)
