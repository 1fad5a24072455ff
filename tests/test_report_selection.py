"""What enters a report row: the search point it reports (chosen among the points that lost the fewest
seeds, so a learning rate that diverged on most seeds does not win on a lucky survivor) and the values
it averages (a finished seed's non-finite value, e.g. an overflowed test perplexity, is left out and
said, instead of crashing the report). Records are built as MLflow's would be read."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math

import pytest

from embinit.comparison import paired, welch
from embinit.tracking.records import TrialRecord
from embinit.report.table import build_report


def _trial(key, label, seed, status, metrics, point=None, task="multi30k"):
    group = {"axes": {}, "point": point or {}, "selection": ["val/loss", "min"]}
    return TrialRecord(key, key, task, label, status, {"task": task, "init": label.lower(), "seed": seed,
                                                        "epochs": 4, **(point or {})},
                       group, {"best_epoch": 2, **metrics}, seed, start_ms=len(key))


def _report(trials):
    return build_report("t", chosen={t.key: t for t in trials}, planned=[])


def test_a_point_that_lost_seeds_does_not_win_on_its_survivor():
    hot, cool = {"lr": 1e-3}, {"lr": 1e-4}
    trials = [_trial("h0", "Xavier", 0, "diverged", {}, hot), _trial("h1", "Xavier", 1, "diverged", {}, hot),
              _trial("h2", "Xavier", 2, "finished", {"best/val/loss": 1.0, "test/bleu": 40.0}, hot)]
    trials += [_trial(f"c{s}", "Xavier", s, "finished", {"best/val/loss": 2.0, "test/bleu": 30.0 + s}, cool)
               for s in range(3)]
    (row,) = _report(trials).rows
    assert row["point"] == cool and row["n"] == 3 and row["mean"] == pytest.approx(31.0)
    # with the same losses, the better mean wins again
    trials[1] = _trial("h1", "Xavier", 1, "finished", {"best/val/loss": 1.0, "test/bleu": 40.0}, hot)
    trials[0] = _trial("h0", "Xavier", 0, "finished", {"best/val/loss": 1.0, "test/bleu": 40.0}, hot)
    assert _report(trials).rows[0]["point"] == hot


def test_points_are_compared_on_the_seeds_they_share():
    """A point whose other seeds failed won with its one seed (1.5) over a point of three seeds whose mean
    (1.67) was worse, though on that same seed the other point was better (1.4): the best of several noisy
    means favours the noisiest. Points now compete on the seeds every one finished (walkthrough, SST-2)."""
    lone, full = {"lr": 1e-2}, {"lr": 3e-3}
    trials = [_trial("l0", "GloVe", 0, "finished", {"best/val/loss": 1.5, "test/bleu": 41.0}, lone),
              _trial("l1", "GloVe", 1, "failed", {}, lone), _trial("l2", "GloVe", 2, "running", {}, lone)]
    trials += [_trial(f"f{s}", "GloVe", s, "finished", {"best/val/loss": loss, "test/bleu": 30.0 + s}, full)
               for s, loss in enumerate((1.4, 1.8, 1.8))]
    report = _report(trials)
    (row,) = report.rows
    assert row["point"] == full and row["n"] == 3 and row["point_compared_on"] == [0]   # the row: all 3 seeds
    assert ("Search points compared on the seeds every point finished (their seeds differ; the row's numbers are "
            "over all of its point's seeds):\n- multi30k GloVe [lr=0.003]: seeds 0\n") in report.to_markdown()
    # the same seeds at every point: each point's own mean, as before, and nothing to say
    trials[1:3] = [_trial(f"l{s}", "GloVe", s, "finished", {"best/val/loss": 1.5, "test/bleu": 41.0}, lone)
                   for s in (1, 2)]
    report = _report(trials)
    assert report.rows[0]["point"] == lone and report.rows[0]["point_compared_on"] is None
    assert "compared on the seeds" not in report.to_markdown()


def test_a_point_the_newest_spec_does_not_search_is_said_when_it_wins():
    """A grid run with lr 1e-3 and 1e-4, then the spec again without 1e-3 and with more seeds: the report over
    the experiment still chose 1e-3 (every point competes) with no word, while the sweep's own table said 1e-4."""
    hot, cool = {"lr": 1e-3}, {"lr": 1e-4}
    trials = [_trial(f"h{s}", "Xavier", s, "finished", {"best/val/loss": 1.0, "test/bleu": 40.0}, hot)
              for s in range(2)]
    trials += [_trial(f"c{s}", "Xavier", s, "finished", {"best/val/loss": 2.0, "test/bleu": 30.0}, cool)
               for s in range(3)]
    planned = [{"key": f"c{s}", "task": "multi30k", "label": "Xavier", "axes": {}, "point": cool, "seed": s,
                "config": None} for s in range(3)]
    report = build_report("t", chosen={t.key: t for t in trials}, planned=planned)
    assert report.rows[0]["point"] == hot and report.rows[0]["planned_points"] == [cool]
    assert ("Reported at a search point the newest sweep's spec does not search (the best point is chosen among "
            "every point the experiment's runs hold, the earlier sweeps' too):\n- multi30k Xavier [lr=0.001]: the "
            "spec searches lr=0.0001\n") in report.to_markdown()
    assert _report(trials).rows[0]["planned_points"] is None                      # no plan: nothing to say
    planned += [{**planned[0], "key": "h0", "point": hot}]
    assert "Reported at" not in build_report("t", chosen={t.key: t for t in trials}, planned=planned).to_markdown()


def test_the_curves_name_each_inits_reported_search_point(tmp_path, monkeypatch):
    """With a search each init's curves are its best point's seeds: the legend said 'Xavier', 'GloVe' only."""
    from embinit import plots
    from embinit.report import plots as report_plots
    trials = [_trial(f"{label}{lr}{s}", label, s, "finished", {"best/val/loss": loss + s}, {"lr": lr})
              for label, best in (("Xavier", 1e-3), ("GloVe", 1e-4)) for lr in (1e-3, 1e-4) for s in range(2)
              for loss in [1.0 if lr == best else 2.0]]
    drawn = []
    monkeypatch.setattr(report_plots, "_histories", lambda uri, run_ids, metric: [{1: 1.0}] * len(run_ids))
    monkeypatch.setattr(plots, "figure1", lambda panels, path, title: drawn.append(panels) or path)
    _report(trials).plot(tmp_path)
    assert list(drawn[0][0][1]) == ["Xavier [lr=0.001]", "GloVe [lr=0.0001]"]


def test_a_non_finite_value_is_left_out_and_said():
    trials = [_trial(f"x{s}", "Xavier", s, "finished", {"test/ppl": v}, task="synthetic_lm")
              for s, v in enumerate([20.0, 22.0, math.inf])]
    trials += [_trial(f"g{s}", "GloVe", s, "finished", {"test/ppl": v}, task="synthetic_lm")
               for s, v in enumerate([30.0, math.nan, 31.0])]
    report = _report(trials)
    rows = {r["init"]: r for r in report.rows}
    assert (rows["Xavier"]["n"], rows["Xavier"]["mean"], rows["Xavier"]["non_finite"]) == (2, 21.0, 1)
    assert rows["GloVe"]["vs_baseline"]["pairs"] == 1                # seed 0 only: 1 and 2 lost a side
    text = report.to_markdown()
    assert "- synthetic_lm Xavier (test/ppl): 1 finished seed(s) logged a non-finite value" in text
    assert "non_finite" in report.to_csv().splitlines()[0]
    assert json.loads(report.to_json())["rows"][0]["non_finite"] == 1
    assert "\\textbf{21.00}" in report.to_latex()


def test_a_finished_seed_without_a_value_is_counted_and_said():
    """A trial can finish without its task's metric: an LM trained on `valid` and validated on `test` (no test
    split left, so no test/ppl), a trial whose every validation was NaN (no best epoch, so no test metrics).
    Such a seed was in no count of its row (not n, non_finite, diverged, failed or running): a row of two
    finished seeds read n = 1 and nothing else."""
    trials = [_trial(f"x{s}", "Xavier", s, "finished", m, task="synthetic_lm")
              for s, m in enumerate([{"test/ppl": 20.0}, {"test/ppl": 22.0}, {}])]
    trials += [_trial(f"g{s}", "GloVe", s, "finished", {}, task="synthetic_lm") for s in range(2)]
    report = _report(trials)
    rows = {r["init"]: r for r in report.rows}
    assert (rows["Xavier"]["n"], rows["Xavier"]["non_finite"], rows["Xavier"]["no_value"]) == (2, 0, 1)
    assert (rows["GloVe"]["n"], rows["GloVe"]["no_value"]) == (0, 2)
    text = report.to_markdown()
    assert "- synthetic_lm Xavier (test/ppl): 1 finished seed(s) logged no value of it" in text
    assert "- synthetic_lm GloVe (test/ppl): 2 finished seed(s) logged no value of it" in text
    assert "no_value" in report.to_csv().splitlines()[0]


def test_comparisons_leave_non_finite_values_out():
    assert paired({"0": 1.0, "1": math.inf, "2": 3.0}, {"0": 0.0, "1": 0.0, "2": 1.0})["pairs"] == 2
    assert welch([1.0, 2.0, math.nan], [0.0, 1.0])["n"] == (2, 2)


def test_an_init_is_compared_only_with_a_baseline_trained_like_it():
    """GloVe at 10 epochs against Xavier at 20 would read "worse" for the budget, not the init."""
    def runs(label, prefix, epochs, values):
        out = []
        for s, v in enumerate(values):
            t = _trial(f"{prefix}{s}", label, s, "finished", {"test/bleu": v})
            t.config["epochs"] = epochs
            out.append(t)
        return out
    trials = runs("Xavier", "x", 20, [35.0, 36.0, 37.0]) + runs("GloVe", "g", 10, [30.0, 30.5, 31.0])
    report = _report(trials)
    glove = next(r for r in report.rows if r["init"] == "GloVe")
    assert glove["vs_baseline"] is None
    assert glove["no_baseline"] == "the baseline was trained otherwise (epochs=10 here, 20 there)"
    assert "- multi30k GloVe (test/bleu): not compared with Xavier: the baseline was trained otherwise" in \
        report.to_markdown()
    assert "_basis" not in report.to_json() and "$^{\\downarrow" not in report.to_latex()
    assert [r["verdict_note"] for r in csv.DictReader(io.StringIO(report.to_csv())) if r["init"] == "GloVe"] == [
        "not compared with Xavier: the baseline was trained otherwise (epochs=10 here, 20 there)"]
    # GloVe at both budgets: the 20-epoch row is compared, the 10-epoch one is not
    both = _report(trials + runs("GloVe", "h", 20, [33.0, 34.0, 35.0]))
    rows = {(r["init"], r["setting"].get("epochs")): r for r in both.rows}
    assert rows[("GloVe", 20)]["vs_baseline"]["pairs"] == 3 and rows[("GloVe", 20)]["vs_baseline"]["diff"] == -2.0
    assert rows[("GloVe", 10)]["vs_baseline"] is None and "epochs=10 here" in rows[("GloVe", 10)]["no_baseline"]


def test_a_baseline_without_trials_gives_no_reason_to_misread():
    from embinit.report import baseline as report_baseline
    rows = [{"task": "multi30k", "init": "Xavier", "axes": {}, "metric": "test/bleu", "setting": {}, "seeds": {},
             "_basis": None},
            {"task": "multi30k", "init": "GloVe", "axes": {}, "metric": "test/bleu", "setting": {},
             "seeds": {"0": 1.0}, "_basis": {"epochs": 4}}]
    report_baseline.compare_rows(rows, "Xavier")
    # not "trained otherwise": the baseline's row has no trial to have been trained any way
    assert rows[1]["vs_baseline"] is None and rows[1]["no_baseline"] == "Xavier has no finished seed here"
    assert "_basis" not in rows[1]


def test_a_row_whose_baseline_has_no_finished_seed_says_why_it_is_not_compared():
    """A cancelled sweep that never started Xavier on one task, or an lr at which every Xavier seed
    diverged, left the other inits' rows out of the comparison table without a word."""
    trials = [_trial(f"x{s}", "Xavier", s, "diverged", {}) for s in range(2)]
    trials += [_trial(f"g{s}", "GloVe", s, "finished", {"test/bleu": 30.0 + s}) for s in range(2)]
    report = _report(trials)
    glove = next(r for r in report.rows if r["init"] == "GloVe")
    assert glove["vs_baseline"] is None and glove["no_baseline"] == "Xavier has no finished seed here (2 diverged)"
    assert ("- multi30k GloVe (test/bleu): not compared with Xavier: Xavier has no finished seed here (2 diverged)"
            in report.to_markdown())
    table = {r["init"]: r for r in csv.DictReader(io.StringIO(report.to_csv()))}   # the CSV says it too
    assert table["GloVe"]["verdict_note"] == "not compared with Xavier: Xavier has no finished seed here (2 diverged)"
    assert table["GloVe"]["verdict"] == table["Xavier"]["verdict_note"] == ""
    from embinit.report import baseline as report_baseline
    rows = [{"task": "sst2", "init": "Xavier", "axes": {}, "metric": "best/val/acc", "setting": {}, "seeds": {},
             "never_started": 3, "_basis": None},
            {"task": "sst2", "init": "GloVe", "axes": {}, "metric": "best/val/acc", "setting": {},
             "seeds": {"0": 0.8}, "_basis": {"epochs": 4}},
            {"task": "sst2", "init": "Normal", "axes": {}, "metric": "best/val/acc", "setting": {}, "seeds": {},
             "never_started": 3, "_basis": None}]
    report_baseline.compare_rows(rows, "Xavier")
    assert rows[1]["no_baseline"] == "Xavier has no finished seed here (3 never started)"
    assert "no_baseline" not in rows[2]   # nothing to compare on either side: no reason needed


def test_a_row_of_a_task_the_baseline_never_trained_says_why_it_is_not_compared():
    """Two specs logging to one experiment, Xavier and Normal on synthetic_lm, Normal and XavierNormal on
    synthetic_classification: the classification rows had no comparison and no word why."""
    trials = [_trial(f"x{s}", "Xavier", s, "finished", {"test/bleu": 30.0 + s}) for s in range(2)]
    trials += [_trial(f"g{s}", "GloVe", s, "finished", {"test/bleu": 31.0 + s}) for s in range(2)]
    trials += [_trial(f"n{s}", "Normal", s, "finished", {"best/val/acc": 0.8}, task="sst2") for s in range(2)]
    report = _report(trials)
    rows = {(r["task"], r["init"]): r for r in report.rows}
    assert rows[("multi30k", "GloVe")]["vs_baseline"]["pairs"] == 2
    assert "no_baseline" not in rows[("multi30k", "Xavier")]
    assert rows[("sst2", "Normal")]["no_baseline"] == "Xavier has no row for this task"
    assert "- sst2 Normal (best/val/acc): not compared with Xavier: Xavier has no row for this task" in \
        report.to_markdown()
    # an experiment without any Xavier says so once, not per row
    alone = _report(trials[2:])
    assert all("no_baseline" not in r for r in alone.rows)
    assert "No Xavier rows to compare with" in alone.to_markdown()


def test_rows_that_trained_at_another_model_size_are_not_compared():
    """A spec without `d_model`: Xavier trains at the task's D=512 (8 heads), GloVe 300d at D=300 (10
    heads), though both configs read d_model None. The report compares by the size each run trained at
    (`embinit.model_size`), so it does not call GloVe better than a wider model."""
    trials = []
    for label, size, values in (("Xavier", {"d_model": 512, "heads": 8}, [30.0, 31.0, 32.5]),
                                ("GloVe", {"d_model": 300, "heads": 10}, [33.0, 34.2, 35.0])):
        for s, v in enumerate(values):
            t = _trial(f"{label}{s}", label, s, "finished", {"test/bleu": v})
            trials.append(dataclasses.replace(t, model_size=size))
    glove = next(r for r in _report(trials).rows if r["init"] == "GloVe")
    assert glove["vs_baseline"] is None
    assert glove["no_baseline"] == ("the baseline was trained otherwise "
                                    "(d_model=300 here, 512 there, heads=10 here, 8 there)")
    # at one size (d_model set in the spec) they are compared, as before
    same = [dataclasses.replace(t, model_size={"d_model": 300, "heads": 10}) for t in trials]
    assert next(r for r in _report(same).rows if r["init"] == "GloVe")["vs_baseline"]["verdict"] == "better"


def test_a_record_reads_the_model_size_its_run_was_tagged_with():
    from types import SimpleNamespace

    from embinit.tracking.records import MODEL_SIZE_TAG, from_run

    def run(tags):
        return SimpleNamespace(info=SimpleNamespace(run_id="r", status="FINISHED", start_time=1, end_time=2),
                               data=SimpleNamespace(tags={"embinit.trial_key": "k", **tags}, metrics={}))
    assert from_run(run({MODEL_SIZE_TAG: '{"d_model": 300, "heads": 10}'})).model_size == {"d_model": 300, "heads": 10}
    assert from_run(run({})).model_size == {} and from_run(run({MODEL_SIZE_TAG: "not json"})).model_size == {}
