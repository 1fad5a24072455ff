"""What a report row must not let a reader overlook: seeds lost to divergence (no verdict in favour of the
side that lost them, no bold), comparisons without any spread (no zero-width interval), counts over
the trials the row stands for, and rows pooling runs of several code versions. Records are built as
MLflow's would be read; no MLflow store: fast."""

from __future__ import annotations

import csv
import io
import json

from embinit.comparison import direction, welch
from embinit.tracking.records import TrialRecord
from embinit.report.table import build_report

XAVIER = [30.0, 31.0, 32.0, 31.5, 30.5]


def _trial(key, label, seed, metrics, status="finished", point=None, task="multi30k", start=None, **tags):
    group = {"axes": {}, "point": point or {}, "selection": ["val/loss", "min"]}
    config = {"task": task, "init": label.lower(), "seed": seed, "epochs": 20, **(point or {})}
    return TrialRecord(key, key, task, label, status, config, group, {"best_epoch": 5, **metrics}, seed,
                       start_ms=len(key) if start is None else start, **tags)


def _report(trials):
    return build_report("t", chosen={t.key: t for t in trials}, planned=[])


def _diverging_glove():
    """GloVe diverges on seeds 2-4; its survivors (0, 1) beat Xavier's same seeds by about 1 BLEU."""
    trials = [_trial(f"x{s}", "Xavier", s, {"test/bleu": v}) for s, v in enumerate(XAVIER)]
    trials += [_trial(f"g{s}", "GloVe", s, {"test/bleu": XAVIER[s] + 1.0 + 0.1 * s}) for s in (0, 1)]
    trials += [_trial(f"g{s}", "GloVe", s, {"best/val/loss": 2.0}, status="diverged") for s in (2, 3, 4)]
    return trials


def test_a_side_that_lost_seeds_to_divergence_is_not_called_better():
    report = _report(_diverging_glove())
    glove = next(r for r in report.rows if r["init"] == "GloVe")
    c = glove["vs_baseline"]
    assert c["ci_low"] > 0                                  # the survivors alone say "better" ...
    assert (c["verdict"], c["survivor_verdict"], c["diverged"]) == ("inconclusive", "better", [3, 0])
    assert c["note"] == "GloVe diverged on 3 of 5 seeds; on the survivors: better"
    text = report.to_markdown()
    assert "| inconclusive (GloVe diverged on 3 of 5 seeds; on the survivors: better) |" in text
    assert "A side that lost seeds to divergence is not called better on its survivors alone" in text
    out = json.loads(report.to_json())["rows"][1]["vs_baseline"]
    assert out["verdict"] == "inconclusive" and out["diverged"] == [3, 0]
    row = [r for r in csv.DictReader(io.StringIO(report.to_csv())) if r["init"] == "GloVe"][0]
    assert (row["diverged"], row["verdict"], row["baseline_diverged"]) == ("3", "inconclusive", "0")
    assert "GloVe diverged on 3 of 5 seeds" in row["verdict_note"]


def test_latex_marks_divergence_and_does_not_bold_the_survivors_mean():
    tex = _report(_diverging_glove()).to_latex()
    glove = next(line for line in tex.splitlines() if line.startswith("GloVe &"))
    xavier = next(line for line in tex.splitlines() if line.startswith("Xavier &"))
    assert "\\textbf" not in glove and "\\uparrow" not in glove and "\\ddagger" in glove
    assert "\\textbf{31.00}" in xavier                      # the best mean of the rows that lost no seed
    assert "$\\ddagger$: seeds diverged (GloVe on multi30k: 3 of 5)" in tex


def test_a_verdict_against_the_diverging_side_stands():
    trials = [_trial(f"x{s}", "Xavier", s, {"test/bleu": v}) for s, v in enumerate(XAVIER)]
    trials += [_trial(f"g{s}", "GloVe", s, {"test/bleu": XAVIER[s] - 5.0 - 0.1 * s}) for s in (0, 1, 2)]
    trials += [_trial(f"g{s}", "GloVe", s, {}, status="diverged") for s in (3, 4)]
    c = next(r for r in _report(trials).rows if r["init"] == "GloVe")["vs_baseline"]
    assert (c["verdict"], c["diverged"]) == ("worse", [2, 0])
    assert c["note"] == "GloVe diverged on 2 of 5 seeds"


def test_a_diverging_baseline_does_not_make_the_row_worse_on_its_survivors():
    trials = [_trial(f"x{s}", "Xavier", s, {"test/bleu": v}) for s, v in enumerate(XAVIER[:3])]
    trials += [_trial(f"x{s}", "Xavier", s, {}, status="diverged") for s in (3, 4)]
    trials += [_trial(f"g{s}", "GloVe", s, {"test/bleu": v - 4.0 - 0.1 * s}) for s, v in enumerate(XAVIER)]
    c = next(r for r in _report(trials).rows if r["init"] == "GloVe")["vs_baseline"]
    assert (c["verdict"], c["survivor_verdict"], c["diverged"]) == ("inconclusive", "worse", [0, 2])
    assert c["note"] == "Xavier diverged on 2 of 5 seeds; on the survivors: worse"


def test_identical_differences_give_no_interval_and_no_verdict():
    """Two seeds whose dev accuracies differ by the same quantum (0.0012): no zero-width interval."""
    trials = [_trial(f"x{s}", "Xavier", s, {"best/val/acc": v}, task="sst2") for s, v in enumerate([0.8188, 0.8288])]
    trials += [_trial(f"g{s}", "GloVe", s, {"best/val/acc": v}, task="sst2") for s, v in enumerate([0.82, 0.83])]
    trials += [_trial(f"n{s}", "Normal", s, {"best/val/acc": 0.9}, task="sst2") for s in (0, 1)]
    report = _report(trials)
    rows = {r["init"]: r for r in report.rows}
    glove = rows["GloVe"]["vs_baseline"]
    assert glove["ci95"] is None and glove["verdict"] == "inconclusive"
    assert glove["reason"] == "zero variance: the 2 paired differences are identical"
    assert rows["Normal"]["ci95"] is None and rows["Normal"]["std"] == 0.0    # nor a zero-width row interval
    assert rows["Normal"]["vs_baseline"]["verdict"] == "better"              # its differences do vary
    md = report.to_markdown()
    assert "| - (zero variance: the 2 paired differences are identical) | 2 | - | inconclusive |" in md   # no p
    assert "zero variance" in [r for r in csv.DictReader(io.StringIO(report.to_csv()))
                               if r["init"] == "GloVe"][0]["verdict_note"]


def test_welch_without_spread_on_either_side_gives_no_interval():
    c = welch([1.0, 1.0], [0.99, 0.99])
    assert (c["ci95"], c["reason"]) == (None, "zero variance: each side's values are identical")
    assert direction(c, "best/val/acc") == "inconclusive"
    assert welch([1.0, 1.0], [0.98, 0.99])["ci95"] is not None    # one side varies: Welch's df = n_b - 1


def test_counts_are_of_the_reported_point_and_running_is_shown():
    """3 failures and a divergence at lr=1e-3, the row reports lr=2e-4 (3 finished, 2 running)."""
    hot, cool = {"lr": 1e-3}, {"lr": 2e-4}
    trials = [_trial(f"c{s}", "Xavier", s, {"test/bleu": 30.0 + s, "best/val/loss": 2.0}, point=cool) for s in range(3)]
    trials += [_trial(f"hf{s}", "Xavier", s, {}, status="failed", point=hot) for s in range(3)]
    trials += [_trial("hd3", "Xavier", 3, {}, status="diverged", point=hot)]
    trials += [_trial(f"cr{s}", "Xavier", s, {}, status="running", point=cool) for s in (3, 4)]
    report = _report(trials)
    (row,) = report.rows
    assert row["point"] == cool
    assert (row["n"], row["failed"], row["diverged"], row["running"]) == (3, 0, 0, 2)
    assert row["all_points"] == {"failed": 3, "diverged": 1, "running": 2}
    text = report.to_markdown()
    assert "| diverged | failed | running |" in text and "| 0 | 0 | 2 |" in text
    # named by the point it reports, said as such: the counts are the other points' (walkthrough)
    assert "- multi30k Xavier (reported at lr=0.0002): 3 failed, 1 diverged" in text
    (line,) = csv.DictReader(io.StringIO(report.to_csv()))
    assert (line["running"], line["failed"], line["failed_all_points"], line["diverged_all_points"]) == \
        ("2", "0", "3", "1")
    assert len(report.failed) == 3     # the failed trials are still listed, wherever they ran


def test_a_row_pooling_seeds_of_two_code_versions_says_so():
    """A version bump and a partial rerun: seeds 0-1 from the new code, 2-4 from the old."""
    old = [_trial(f"o{s}", "Xavier", s, {"test/bleu": 30.0 + s / 10}, start=s, code_version="1") for s in range(5)]
    new = [_trial(f"n{s}", "Xavier", s, {"test/bleu": 33.0 + s / 10}, start=100 + s, code_version="2")
           for s in range(2)]
    report = _report(old + new)
    (row,) = report.rows
    assert row["n"] == 5 and row["code_versions"] == {"1": 3, "2": 2}
    assert "- multi30k Xavier (test/bleu): 3 seed(s) under version 1, 2 seed(s) under version 2" in \
        report.to_markdown()
    assert json.loads(next(csv.DictReader(io.StringIO(report.to_csv())))["code_versions"]) == {"1": 3, "2": 2}
    (one,) = _report(old).rows
    assert one["code_versions"] == {"1": 5} and "code versions" not in _report(old).to_markdown()


def test_dev_numbers_selected_on_dev_are_labelled():
    trials = [_trial(f"x{s}", "Xavier", s, {"best/val/acc_matched": 0.70 + s / 100,
                                            "best/val/acc_mismatched": 0.71 + s / 100}, task="mnli") for s in range(3)]
    report = _report(trials)
    assert {r["split"] for r in report.rows} == {"dev, selected on dev"}
    assert ("best/val/acc_matched, best/val/acc_mismatched: dev, selected on dev" in report.to_markdown())
    assert "dev, selected on dev" in next(csv.DictReader(io.StringIO(report.to_csv())))["split"]
    assert "dev, selected on dev" in report.to_latex()
    bleu = _report([_trial(f"x{s}", "Xavier", s, {"test/bleu": 30.0 + s}) for s in range(3)])
    assert bleu.rows[0]["split"] == "test" and "selected on dev" not in bleu.to_markdown()


def test_small_means_keep_two_significant_digits():
    """BLEU after a short run: 0.0183 against 0.0074 must not both print as 0.01 (nor the difference
    as -0.01 or -0.00); a column keeps one number of decimals, and ordinary values keep two."""
    xavier, glove = [0.0183, 0.0187, 0.0179], [0.0074, 0.0071, 0.0077]
    trials = [_trial(f"x{s}", "Xavier", s, {"test/bleu": v}) for s, v in enumerate(xavier)]
    trials += [_trial(f"g{s}", "GloVe", s, {"test/bleu": v}) for s, v in enumerate(glove)]
    trials += [_trial(f"s{s}", "Xavier", s, {"test/bleu": v}, task="iwslt2017") for s, v in enumerate(XAVIER[:3])]
    report = _report(trials)
    text = report.to_markdown()
    assert "| multi30k | Xavier | test/bleu | 0.0183 (0.0004) |" in text
    assert "| multi30k | GloVe | test/bleu | 0.0074 (0.0003) |" in text
    assert "| multi30k | GloVe | test/bleu (higher is better) | -0.0109 |" in text
    assert "| iwslt2017 | Xavier | test/bleu | 31.00 (1.00) |" in text   # another task: its own precision
    tex = report.to_latex()
    glove_line = next(line for line in tex.splitlines() if line.startswith("GloVe &"))
    assert "\\textbf{0.0183}" in tex and "0.0074 (0.0003)" in glove_line and "\\textbf" not in glove_line


def test_a_translation_init_whose_source_table_is_another_init_says_so_in_every_format():
    """`{tgt: glove, src: xavier}` is labelled "GloVe" (the paper's name for its row): the markdown, the
    CSV and the LaTeX caption say that its source table is Xavier; an init on both tables, none."""
    trials = [_trial(f"x{s}", "Xavier", s, {"test/bleu": v}) for s, v in enumerate(XAVIER[:3])]
    trials += [TrialRecord(f"g{s}", f"g{s}", "multi30k", "GloVe", "finished",
                           {"task": "multi30k", "init": "glove", "src_init": "xavier", "seed": s, "epochs": 20},
                           {"axes": {}, "point": {}, "selection": ["val/loss", "min"]},
                           {"best_epoch": 5, "test/bleu": 30.0 + s}, s, start_ms=2) for s in range(3)]
    report = _report(trials)
    md = report.to_markdown()
    assert "- multi30k GloVe: target `glove`, source `xavier`" in md
    assert "multi30k Xavier:" not in md
    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert {r["init"]: r["source_init"] for r in rows} == {"Xavier": "", "GloVe": "xavier"}
    assert "GloVe on multi30k: source xavier" in report.to_latex()
    assert "Source" not in _report(trials[:3]).to_markdown() + _report(trials[:3]).to_latex()


def test_a_language_model_validated_on_the_test_split_says_so_also_for_runs_recorded_before():
    """`extras: {train_split: valid, eval_split: test}` (the offline blog spec): val/* is the test split and
    there is no test/ppl. The report said only "logged no value"; it now says which split val/* is, read
    from the config every run records (runs from before the run's description say it too)."""
    extras = {"train_split": "valid", "eval_split": "test"}
    trials = [TrialRecord(f"k{s}", f"k{s}", "wikitext2", "Xavier", "finished",
                          {"task": "wikitext2", "init": "xavier", "seed": s, "extras": extras},
                          {"axes": {}, "point": {}, "selection": ["val/ppl", "min"]},
                          {"best_epoch": 3, "best/val/ppl": 40.0 + s}, s, start_ms=s) for s in (0, 1)]
    report = _report(trials)
    said = "val/* is the test split (eval_split: test); no separate test split"
    (row,) = report.rows
    assert (row["metric"], row["n"], row["no_value"], row["eval_split_note"]) == ("test/ppl", 0, 2, said)
    md = report.to_markdown()
    assert f"- wikitext2 Xavier (test/ppl): 2 finished seed(s) logged no value of it: {said}" in md
    assert f"- wikitext2 Xavier: {said}" in md
    (line,) = csv.DictReader(io.StringIO(report.to_csv()))
    assert line["eval_split_note"] == said
    plain = _report([_trial("p0", "Xavier", 0, {"test/ppl": 30.0}, task="wikitext2")])
    assert plain.rows[0]["eval_split_note"] is None and "Validated on another split" not in plain.to_markdown()


def _axed(key, label, seed, value, axes):
    group = {"axes": axes, "point": {}, "selection": ["val/loss", "min"]}
    config = {"task": "multi30k", "init": label.lower(), "seed": seed, "epochs": 20}
    return TrialRecord(key, key, "multi30k", label, "finished", config, group,
                       {"best_epoch": 5, "test/bleu": value}, seed, start_ms=1)


def test_an_init_planned_without_a_moot_axis_is_the_baseline_at_every_value_of_it():
    """Under `axes: {oov: [xavier, zeros]}` Xavier is planned once, with no oov (its table has no rows for a
    rule): each oov row of GloVe_Xavier is still compared with it; before, no row found its baseline and
    the report said nothing. The plan of that spec counts Xavier's trials as run (no phantom row)."""
    trials = [_axed(f"x{s}", "Xavier", s, 30.0 + s, {}) for s in range(3)]
    trials += [_axed(f"g{v}{s}", "GloVe_Xavier", s, 31.0 + s + 0.1 * (v == "zeros") + 0.05 * s * s,
                     {"oov": v}) for v in ("xavier", "zeros") for s in range(3)]
    planned = [{"key": t.key, "task": "multi30k", "label": t.label, "axes": t.axes, "point": {}, "seed": t.seed}
               for t in trials]
    report = build_report("t", chosen={t.key: t for t in trials}, planned=planned)
    compared = {json.dumps(r["axes"]): r["vs_baseline"] for r in report.rows if r["init"] == "GloVe_Xavier"}
    assert set(compared) == {'{"oov": "xavier"}', '{"oov": "zeros"}'}
    assert all(c and c["pairs"] == 3 and c["diff"] > 0.9 for c in compared.values())
    assert report.completeness["unfinished"] == 0


def test_an_older_plans_runs_at_each_value_of_a_now_moot_axis_stand_for_the_trial_planned_without_it():
    """A store an older version wrote (Xavier run at oov=xavier and oov=zeros, keys of that version) read
    with today's plan (Xavier once, no oov axis): its runs count, and no empty Xavier row is invented."""
    old = [_axed(f"x{v}{s}", "Xavier", s, 30.0, {"oov": v}) for v in ("xavier", "zeros") for s in range(3)]
    planned = [{"key": f"new{s}", "task": "multi30k", "label": "Xavier", "axes": {}, "point": {}, "seed": s}
               for s in range(3)]
    report = build_report("t", chosen={t.key: t for t in old}, planned=planned)
    assert report.completeness["unfinished"] == 0
    assert sorted(json.dumps(r["axes"]) for r in report.rows) == ['{"oov": "xavier"}', '{"oov": "zeros"}']


def test_figure_1_draws_an_init_planned_without_a_moot_axis_in_each_figure_of_that_axis():
    """Xavier (no oov) had a figure of its own and no figure held it beside the oov rows it is compared
    with; a figure of other axes (pos_encoding) is left alone."""
    from embinit.report.plots import _joined
    figures = {("multi30k", "{}"): ["Xavier"], ("multi30k", '{"oov": "xavier"}'): ["GloVe_Xavier"],
               ("multi30k", '{"oov": "zeros"}'): ["GloVe_Xavier"], ("sst2", "{}"): ["Xavier", "GloVe"],
               ("sst2", '{"pos_encoding": false}'): ["GloVe"]}
    assert _joined(figures) == {("multi30k", '{"oov": "xavier"}'): ["GloVe_Xavier", "Xavier"],
                                ("multi30k", '{"oov": "zeros"}'): ["GloVe_Xavier", "Xavier"],
                                ("sst2", "{}"): ["Xavier", "GloVe"], ("sst2", '{"pos_encoding": false}'): ["GloVe"]}


def test_a_planned_translation_init_that_never_started_still_says_its_source_table():
    """A cancelled experiment: GloVe's trials ran, GloVe_Xavier's (`{tgt: glove+standardize, src: xavier}`)
    never started. Its empty row is in the table, so the source-table note, the CSV's source_init and the
    LaTeX caption say its source table from the plan, as they do for GloVe from its runs (they named
    GloVe alone, which read as if GloVe_Xavier's source table were its target's)."""
    cfg = {"task": "multi30k", "src_init": "xavier", "epochs": 20}
    trials = [TrialRecord(f"g{s}", f"g{s}", "multi30k", "GloVe", "finished", {**cfg, "init": "glove", "seed": s},
                          {"axes": {}, "point": {}, "selection": ["val/loss", "min"]},
                          {"best_epoch": 5, "test/bleu": 30.0 + s}, s, start_ms=2) for s in range(2)]
    planned = [{"key": t.key, "task": "multi30k", "label": "GloVe", "axes": {}, "point": {}, "seed": t.seed,
                "config": t.config} for t in trials]
    planned += [{"key": f"gx{s}", "task": "multi30k", "label": "GloVe_Xavier", "axes": {}, "point": {}, "seed": s,
                 "config": {**cfg, "init": "glove+standardize", "seed": s}} for s in range(2)]
    report = build_report("t", chosen={t.key: t for t in trials}, planned=planned)
    md = report.to_markdown()
    assert "Inits with no finished trial: multi30k: GloVe_Xavier." in md
    assert "- multi30k GloVe: target `glove`, source `xavier`" in md
    assert "- multi30k GloVe_Xavier: target `glove+standardize`, source `xavier`" in md
    rows = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert {r["init"]: (r["n"], r["source_init"]) for r in rows} == {"GloVe": ("2", "xavier"),
                                                                     "GloVe_Xavier": ("0", "xavier")}
    assert "GloVe_Xavier on multi30k: source xavier" in report.to_latex().replace("\\_", "_")


def test_latex_tells_a_row_whose_every_seed_diverged_from_one_that_never_finished():
    """A row whose seeds all diverged printed `--` and the caption's "--: no finished seed", the mark of
    a row still running or never started: the divergence, the finding, was not in the table."""
    trials = [_trial(f"x{s}", "Xavier", s, {"test/bleu": v}) for s, v in enumerate(XAVIER[:3])]
    trials += [_trial(f"g{s}", "GloVe", s, {}, status="diverged") for s in (0, 1, 2)]
    tex = _report(trials).to_latex()
    glove = next(line for line in tex.splitlines() if line.startswith("GloVe &"))
    assert glove == "GloVe & --$^{\\ddagger}$ \\\\", glove
    assert "$\\ddagger$: seeds diverged (GloVe on multi30k: 3 of 3)" in tex
    assert "--$^{\\ddagger}$: every seed diverged." in tex and "no finished seed" not in tex
