"""Issue 22's "answer at a glance", the way a user meets it in `embinit report` and in the service's
results: each init's difference from a baseline (paired on the shared seeds, Welch only when none is
shared; checked against scipy), a verdict that knows the metric's direction, the flag on rows still
improving at their last epoch, means and intervals inside the metric's range, what a cancelled
experiment never finished, and the experiments that exist when a name is misspelled. Runs are written
with embinit.tracking.trial_run into a temporary SQLite store, the way the sweep writes them."""

from __future__ import annotations

import csv
import io
import json

import pytest
from scipy import stats

from embinit.tracking import mlflow_store, run_writers, trial_run
from embinit.cli import main
from embinit.spec import load_spec

pytestmark = pytest.mark.slow  # creates an MLflow SQLite store

XAVIER = [30.0, 32.0, 31.0, 33.0]                 # seeds 0-3
GLOVE = [20.0, 22.5, 20.5]                        # seeds 0-2: seed 3 is missing
GLOVE_XAVIER = [30.5, 31.0, 31.5, 33.2]           # seeds 0-3: within noise of Xavier
NORMAL = {5: 10.0, 6: 12.0}                       # no seed shared with Xavier


def _trial(uri, exp, key, label, seed, bleu, best_epoch=2, epochs=4, parent=None):
    cfg = {"task": "multi30k", "init": label.lower(), "seed": seed, "epochs": epochs}
    run = trial_run.TrialRun.open(uri, exp, parent, cfg, key, label, {"axes": {}, "point": {}})
    history = [{"epoch": e, "val/loss": 3.0 - e / 10, "val/bleu": bleu} for e in range(1, epochs + 1)]
    run.finish({"status": "finished", "history": history, "best": {"val/loss": 2.5},
                "test": {"test/bleu": bleu}, "best_epoch": best_epoch}, [])


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    exp = mlflow_store.ensure_experiment("cmp", uri)
    for seed, v in enumerate(XAVIER):
        _trial(uri, exp, f"x{seed}", "Xavier", seed, v)
    for seed, v in enumerate(GLOVE):   # best at the last epoch (4) for seeds 0 and 1: still improving
        _trial(uri, exp, f"g{seed}", "GloVe", seed, v, best_epoch=4 if seed < 2 else 2)
    for seed, v in enumerate(GLOVE_XAVIER):
        _trial(uri, exp, f"gx{seed}", "GloVe_Xavier", seed, v)
    for seed, v in NORMAL.items():
        _trial(uri, exp, f"n{seed}", "Normal", seed, v)
    return uri


def _report(uri, capsys, *args, name="cmp"):
    assert main(["report", name, "--tracking-uri", uri, *args]) == 0
    captured = capsys.readouterr()
    assert "Downloading artifacts" not in captured.err   # reading the sweep's spec draws no progress bar
    return captured.out


def _rows(uri, capsys, *args):
    return {r["init"]: r for r in json.loads(_report(uri, capsys, "--format", "json", *args))["rows"]}


def test_each_init_is_compared_with_xavier_paired_on_the_shared_seeds(uri, capsys):
    rows = _rows(uri, capsys)
    glove = rows["GloVe"]["vs_baseline"]
    lo, hi = stats.ttest_rel(GLOVE, XAVIER[:3]).confidence_interval(0.95)   # the three shared seeds
    assert (glove["baseline"], glove["test"], glove["pairs"], glove["n"]) == ("Xavier", "paired t", 3, [3, 4])
    assert glove["diff"] == pytest.approx(-10.0, abs=1e-12)
    assert (glove["ci_low"], glove["ci_high"]) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))
    assert glove["verdict"] == "worse" and glove["higher_is_better"] is True
    assert rows["GloVe_Xavier"]["vs_baseline"]["verdict"] == "inconclusive"
    normal = rows["Normal"]["vs_baseline"]          # no seed shared: Welch on the two means
    lo, hi = stats.ttest_ind(list(NORMAL.values()), XAVIER, equal_var=False).confidence_interval(0.95)
    assert (normal["test"], normal["pairs"]) == ("Welch", 0)
    assert (normal["ci_low"], normal["ci_high"]) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))
    assert rows["Xavier"]["vs_baseline"] is None


def test_markdown_shows_the_difference_the_interval_and_the_verdict(uri, capsys):
    out = _report(uri, capsys)
    test = stats.ttest_rel(GLOVE, XAVIER[:3])
    lo, hi = test.confidence_interval(0.95)
    assert test.pvalue < 0.001 and 3 * test.pvalue < 0.05   # the smallest of 3 p-values: Holm multiplies by 3
    assert "Difference from Xavier" in out
    assert (f"| multi30k | GloVe | test/bleu (higher is better) | -10.00 | [{lo:.2f}, {hi:.2f}] | 3 (of 3 and 4) | "
            f"<0.001 ({3 * test.pvalue:.3g}) | worse (at this budget: still improving) |") in out
    assert "| multi30k | Normal | test/bleu (higher is better) |" in out
    welch = stats.ttest_ind(list(NORMAL.values()), XAVIER, equal_var=False).pvalue   # the 2nd smallest: x 2
    assert f"| none (of 2 and 4): Welch | {welch:.3g} ({2 * welch:.3g}) | worse |" in out


def test_baseline_option_and_csv(uri, capsys):
    rows = _rows(uri, capsys, "--baseline", "GloVe")
    x = rows["Xavier"]["vs_baseline"]
    assert (x["baseline"], x["verdict"], x["diff"]) == ("GloVe", "better", pytest.approx(10.0))
    assert rows["GloVe"]["vs_baseline"] is None
    table = {r["init"]: r for r in csv.DictReader(io.StringIO(_report(uri, capsys, "--format", "csv")))}
    assert table["GloVe"]["verdict"] == "worse" and table["GloVe"]["pairs"] == "3"
    assert float(table["GloVe"]["diff"]) == pytest.approx(-10.0) and table["Xavier"]["verdict"] == ""
    # the budget that qualifies the verdict, which the markdown's verdict cell gives, is in the CSV too
    assert table["GloVe"]["verdict_note"] == "at this budget: still improving"


def test_latex_for_a_paper_carries_the_same_verdicts(uri, capsys):
    tex = _report(uri, capsys, "--format", "latex")
    rows = {line.split(" & ")[0]: line.split(" & ")[1].removesuffix(" \\\\") for line in tex.splitlines()
            if " & " in line and not line.startswith("Init")}
    assert rows["GloVe"].startswith("21.00 (1.32)$^{\\downarrow\\dagger}$")     # worse, still improving
    assert rows["GloVe\\_Xavier"].startswith("\\textbf{31.55}")                 # the best mean, inconclusive
    assert rows["Normal"] == "11.00 (1.41)$^{\\downarrow}$$_{n=2}$"             # Welch: no shared seed
    assert "better/worse than Xavier" in tex
    assert "better/worse than GloVe" in _report(uri, capsys, "--format", "latex", "--baseline", "GloVe")


def test_an_unknown_baseline_names_the_closest_init(uri, capsys):
    assert main(["report", "cmp", "--baseline", "glove_xavier", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert "baseline 'glove_xavier' is not an init of this experiment" in err
    assert "did you mean 'GloVe_Xavier'?" in err and "'Normal'" in err


def test_rows_still_improving_at_their_last_epoch_are_flagged(uri, capsys):
    rows = _rows(uri, capsys)
    assert (rows["GloVe"]["best_at_last_epoch"], rows["GloVe"]["still_improving"]) == (2, True)
    assert (rows["Xavier"]["best_at_last_epoch"], rows["Xavier"]["still_improving"]) == (0, False)
    out = _report(uri, capsys)
    assert "| multi30k | GloVe | test/bleu | 21.00 (1.32) | 3 | 3.3 (last) |" in out
    assert "- multi30k GloVe (test/bleu): best epoch = last epoch for 2 of 3 seeds" in out
    assert "compare training budgets, not converged models" in out
    assert "Xavier (test/bleu): best epoch" not in out


def test_rows_trained_for_one_epoch_are_not_called_still_improving(uri, capsys):
    # with a budget of one epoch the best epoch is the last by construction: the report says one epoch,
    # not "still improving", which one epoch cannot show
    exp = mlflow_store.ensure_experiment("one", uri)
    for seed in range(3):
        _trial(uri, exp, f"o{seed}", "Xavier", seed, 30.0 + seed, best_epoch=1, epochs=1)
        _trial(uri, exp, f"p{seed}", "GloVe", seed, 20.0 + 2 * seed, best_epoch=1, epochs=1)
    rows = {r["init"]: r for r in json.loads(_report(uri, capsys, "--format", "json", name="one"))["rows"]}
    assert (rows["GloVe"]["still_improving"], rows["GloVe"]["one_epoch"]) == (False, 3)
    assert rows["GloVe"]["vs_baseline"]["one_epoch"] is True
    out = _report(uri, capsys, name="one")
    assert "Still improving when" not in out and "(at this budget: still improving)" not in out
    assert "| multi30k | GloVe | test/bleu | 22.00 (2.00) | 3 | 1.0 (of 1) |" in out
    assert "Trained for one epoch" in out and "- multi30k GloVe (test/bleu): 3 of 3 seeds" in out
    assert "| worse (after one epoch) |" in out
    table = {r["init"]: r for r in csv.DictReader(io.StringIO(_report(uri, capsys, "--format", "csv", name="one")))}
    assert table["GloVe"]["one_epoch"] == "3" and table["GloVe"]["best_at_last_epoch"] == "0"
    assert table["GloVe"]["verdict_note"] == "after one epoch"
    tex = _report(uri, capsys, "--format", "latex", name="one")
    assert "\\dagger" not in tex and "trained for one epoch" in tex


def test_means_and_intervals_stay_inside_the_metric_range(uri, capsys):
    # sacrebleu can return 100.00000000000004 for a perfect score: the mean and the interval stay in
    # [0, 100] and ordered
    exp = mlflow_store.ensure_experiment("top", uri)
    for seed, v in enumerate([100.00000000000004, 100.00000000000004, 100.00000000000004]):
        _trial(uri, exp, f"t{seed}", "Xavier", seed, v)
    for seed, v in enumerate([100.00000000000004, 99.0, 100.00000000000004]):
        _trial(uri, exp, f"u{seed}", "GloVe", seed, v)
    rows = json.loads(_report(uri, capsys, "--format", "json", name="top"))["rows"]
    table = list(csv.DictReader(io.StringIO(_report(uri, capsys, "--format", "csv", name="top"))))
    assert rows[0]["ci95"] is None                 # three equal scores: no (zero-width) interval
    for r in rows[1:] + [{k: float(r[k]) for k in ("mean", "ci_low", "ci_high")} for r in table[1:]]:
        assert 0.0 <= r["ci_low"] <= r["mean"] <= r["ci_high"] <= 100.0, r
    assert rows[0]["mean"] == 100.0


def test_a_cancelled_experiment_says_what_never_finished(uri, capsys):
    spec = load_spec({"name": "cancelled", "tasks": ["synthetic_classification"],
                      "inits": ["xavier", "normal", "xavier_normal"], "seeds": 2})
    exp = mlflow_store.ensure_experiment("cancelled", uri)
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials())
    plan = spec.plan()
    for p, status in zip(plan, ("finished", "cancelled")):   # Xavier: one seed finished, one cancelled
        run = trial_run.TrialRun.open(uri, exp, parent, p.config, p.key, p.label, {"axes": {}, "point": {}})
        if status == "cancelled":
            run.fail("cancelled", status="KILLED")
        else:
            run.finish({"status": "finished", "history": [], "best": {"val/acc": 0.8}, "best_epoch": 1}, [])
    run_writers.end_parent_run(parent, uri, "KILLED", None, {})
    out = _report(uri, capsys, name="cancelled")
    assert "**Incomplete: 5 of 6 planned trials never finished** (1 cancelled, 4 never started)." in out
    assert "Inits with no finished trial: synthetic_classification: Normal, XavierNormal." in out
    data = json.loads(_report(uri, capsys, "--format", "json", name="cancelled"))
    assert data["completeness"] == {
        "planned": 6, "finished": 1, "unfinished": 5, "unfinished_by_status": {"cancelled": 1, "never started": 4},
        "inits_without_results": [{"task": "synthetic_classification", "init": "Normal"},
                                  {"task": "synthetic_classification", "init": "XavierNormal"}]}
    # every planned init has its row (n = 0 where nothing finished), in every format
    assert [(r["init"], r["n"]) for r in data["rows"]] == [("Xavier", 1), ("Normal", 0), ("XavierNormal", 0)]
    table = list(csv.DictReader(io.StringIO(_report(uri, capsys, "--format", "csv", name="cancelled"))))
    assert [(r["init"], r["n"]) for r in table] == [("Xavier", "1"), ("Normal", "0"), ("XavierNormal", "0")]
    # the CSV says per row what the other formats say in all: Xavier's cancelled seed started, the
    # other inits' two seeds each never did (2 + 2 = the 4 "never started")
    assert [(r["init"], r["never_started"]) for r in table] == [("Xavier", "0"), ("Normal", "2"),
                                                                  ("XavierNormal", "2")]
    assert [r["never_started"] for r in data["rows"]] == [0, 2, 2]


def test_without_a_plan_the_csv_leaves_never_started_empty(uri, capsys):
    # no sweep run, so no plan: nothing is known to be missing (empty, not 0)
    table = list(csv.DictReader(io.StringIO(_report(uri, capsys, "--format", "csv"))))
    assert table and {r["never_started"] for r in table} == {""}


def test_a_misspelled_experiment_lists_the_ones_that_exist(uri, capsys):
    assert main(["report", "cpm", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert "no MLflow experiment 'cpm'" in err and "did you mean 'cmp'?" in err
    assert "(it has [" in err and "'cmp'" in err.split("it has")[1] and "'Default'" in err


def test_without_a_xavier_row_the_report_says_how_to_pick_a_baseline(uri, capsys):
    exp = mlflow_store.ensure_experiment("no-xavier", uri)
    for seed, v in enumerate([20.0, 21.0]):
        _trial(uri, exp, f"nx-g{seed}", "GloVe", seed, v)
        _trial(uri, exp, f"nx-n{seed}", "Normal", seed, v - 5)
    out = _report(uri, capsys, name="no-xavier")
    assert "No Xavier rows to compare with (`--baseline LABEL`" in out
    assert "| multi30k | GloVe | test/bleu (higher is better) | 5.00 |" in _report(uri, capsys, "--baseline", "Normal",
                                                                                    name="no-xavier")


def test_a_trial_recorded_under_an_older_key_counts_as_run(uri, capsys):
    # the newest sweep's spec is planned again with today's keys; a trial an older version keyed
    # differently (same task, init, axes, point and seed) is not "never started"
    spec = load_spec({"name": "rekeyed", "tasks": ["synthetic_classification"], "inits": ["xavier"], "seeds": 2})
    exp = mlflow_store.ensure_experiment("rekeyed", uri)
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials())
    for i, p in enumerate(spec.plan()):
        run = trial_run.TrialRun.open(uri, exp, parent, p.config, f"old-key-{i}", p.label, {"axes": {}, "point": {}})
        run.finish({"status": "finished", "history": [], "best": {"val/acc": 0.8}, "best_epoch": 1}, [])
    run_writers.end_parent_run(parent, uri, "FINISHED", None, {})
    data = json.loads(_report(uri, capsys, "--format", "json", name="rekeyed"))
    assert (data["completeness"]["finished"], data["completeness"]["unfinished"]) == (2, 0)
    assert "Incomplete" not in _report(uri, capsys, name="rekeyed")


def test_a_planned_cell_whose_trials_another_sweep_recorded_has_no_empty_row(uri, capsys):
    """Table 3's ablation spec records into the main experiment, and its trainable + PE cell is the main sweep's
    trials (the same keys), reused, so they keep the main sweep's row (`Xavier`). The report (the newest sweep's
    plan) also listed `Xavier pos_encoding=True train_embeddings=True` with n = 0, in LaTeX "--: no finished
    seed", while both its seeds had finished. A planned group whose trials have runs under another row is
    now not listed as empty."""
    main_spec = load_spec({"name": "shared-main", "tasks": ["synthetic_classification"], "inits": ["xavier"],
                           "seeds": 2, "mlflow": {"experiment": "shared-cells"}})
    ablation = load_spec({"name": "shared-ablation", "tasks": ["synthetic_classification"], "inits": ["xavier"],
                          "seeds": 2, "axes": {"train_embeddings": [False, True]},
                          "mlflow": {"experiment": "shared-cells"}})
    exp = mlflow_store.ensure_experiment("shared-cells", uri)
    main_keys = set()
    for spec, axes_of in ((main_spec, lambda p: {}), (ablation, lambda p: p.axes)):
        parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials())
        for p in spec.plan():
            if p.key in main_keys:   # the ablation's trainable cell: reused, not trained again
                continue
            main_keys.add(p.key)
            run = trial_run.TrialRun.open(uri, exp, parent, p.config, p.key, p.label,
                                          {"axes": axes_of(p), "point": {}})
            run.finish({"status": "finished", "history": [], "best": {"val/acc": 0.8}, "best_epoch": 1}, [])
        run_writers.end_parent_run(parent, uri, "FINISHED", None, {})
    assert {p.key for p in ablation.plan() if p.axes == {"train_embeddings": True}} <= {
        p.key for p in main_spec.plan()}
    data = json.loads(_report(uri, capsys, "--format", "json", name="shared-cells"))
    assert sorted((r["init"], r["n"]) for r in data["rows"]) == [("Xavier", 2), ("Xavier", 2)]
    assert sorted(json.dumps(r["axes"]) for r in data["rows"]) == ['{"train_embeddings": false}', "{}"]
    assert data["completeness"]["unfinished"] == 0
    assert "no finished seed" not in _report(uri, capsys, "--format", "latex", name="shared-cells")
