"""Comparing m inits with one baseline gives m chances of a false verdict at 95% each: every comparison
carries its test's p-value (scipy's), Holm's adjusted p over the comparisons of its task and metric, and
whether a better/worse verdict holds after that adjustment, in the JSON, CSV, markdown and LaTeX
reports. Records are built as MLflow's would be read; no MLflow store: fast."""

from __future__ import annotations

import csv
import io
import json
import random

import pytest
from scipy import stats

from embinit.comparison import direction, holm, paired, welch
from embinit.report.baseline import p_text as report_p_text
from embinit.report.table import build_report
from embinit.tracking.records import TrialRecord

XAVIER = [30.0, 31.0, 32.0, 31.5]
# each init's per-seed difference from Xavier on multi30k's test/bleu
DIFFS = {
    "GloVe": [-5.0, -5.2, -4.9, -5.1],      # far worse: holds after any correction
    "Weak": [0.6, 1.2, 0.5, 0.9],           # p ~ 0.015: "better" alone, not among 5 comparisons
    "Noise1": [0.3, -0.4, 0.1, -0.2],
    "Noise2": [-0.5, 0.6, 0.2, -0.1],
    "Noise3": [0.9, -0.8, 0.4, -0.3],
}


def _trial(key, label, seed, value, task, axes=None):
    metric = "test/bleu" if task == "multi30k" else "best/val/acc"   # SST-2 reports dev accuracy
    config = {"task": task, "init": label.lower(), "seed": seed, "epochs": 20, **(axes or {})}
    group = {"axes": axes or {}, "point": {}, "selection": ["val/loss", "min"]}
    return TrialRecord(key, key, task, label, "finished", config, group, {"best_epoch": 5, metric: value}, seed,
                       start_ms=len(key))


def _report():
    trials = [_trial(f"x{s}", "Xavier", s, v, "multi30k") for s, v in enumerate(XAVIER)]
    for label, diffs in DIFFS.items():
        trials += [_trial(f"{label}{s}", label, s, XAVIER[s] + d, "multi30k") for s, d in enumerate(diffs)]
    # a task where Weak is the only comparison: its family has one test, so its verdict holds
    trials += [_trial(f"sx{s}", "Xavier", s, v / 100, "sst2") for s, v in enumerate(XAVIER)]
    trials += [_trial(f"sw{s}", "Weak", s, (XAVIER[s] + d) / 100, "sst2") for s, d in enumerate(DIFFS["Weak"])]
    return build_report("t", chosen={t.key: t for t in trials}, planned=[])


def _textbook_holm(ps):
    """Holm (1979) as the definition reads: sort ascending; reject H_(1..k-1) while p_(k) <= alpha/(m-k+1).
    The adjusted p of H_(k) is the largest (m-j+1) p_(j) over j <= k, capped at 1."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    m = len(ps)
    return {i: min(1.0, max((m - j) * ps[order[j]] for j in range(k + 1))) for k, i in enumerate(order)}


def test_holm_matches_the_textbook_and_leaves_untested_comparisons_out():
    ps = [0.01, 0.04, 0.03, 0.005]
    assert holm(ps) == pytest.approx([0.03, 0.06, 0.06, 0.02])     # 4 x .005, 3 x .01, max(2 x .03, 1 x .04)
    assert holm([0.01, None, 0.04]) == [pytest.approx(0.02), None, pytest.approx(0.04)]   # m = 2, not 3
    assert holm([0.04, 0.03]) == pytest.approx([0.06, 0.06])     # monotone: max(2 x .03, 1 x .04)
    assert holm([0.9, 0.8]) == [1.0, 1.0]                         # capped at 1
    rng = random.Random(7)
    for _ in range(50):
        ps = [rng.random() ** 3 for _ in range(rng.randint(1, 9))]
        want = _textbook_holm(ps)
        assert holm(ps) == pytest.approx([want[i] for i in range(len(ps))])


def test_p_values_are_scipys_and_agree_with_the_interval():
    rng = random.Random(11)
    for _ in range(200):
        n = rng.randint(2, 6)
        a = {s: rng.gauss(0.3, 1.0) for s in range(n)}
        b = {s: a[s] + rng.gauss(-0.4, 0.5) for s in range(n)}
        c = paired(a, b)
        assert c["p"] == pytest.approx(stats.ttest_rel(list(a.values()), list(b.values())).pvalue, rel=1e-9)
        assert (c["p"] < 0.05) == (direction(c, "test/bleu") != "inconclusive")
        xs, ys = list(a.values()), [rng.gauss(0.0, 2.0) for _ in range(rng.randint(2, 6))]
        w = welch(xs, ys)
        assert w["p"] == pytest.approx(stats.ttest_ind(xs, ys, equal_var=False).pvalue, rel=1e-9)
        assert (w["p"] < 0.05) == (direction(w, "test/bleu") != "inconclusive")
    assert paired({0: 1.0}, {0: 0.5})["p"] is None and welch([1.0], [2.0, 3.0])["p"] is None   # no test


def test_each_comparison_is_adjusted_over_its_tasks_family():
    rows = {(r["task"], r["init"]): r["vs_baseline"] for r in json.loads(_report().to_json())["rows"]}
    ps = {label: stats.ttest_rel([x + d for x, d in zip(XAVIER, diffs)], XAVIER).pvalue
          for label, diffs in DIFFS.items()}
    adjusted = dict(zip(ps, holm(list(ps.values()))))
    for label in DIFFS:
        c = rows["multi30k", label]
        assert (c["p"], c["p_holm"], c["holm_m"]) == (pytest.approx(ps[label]), pytest.approx(adjusted[label]), 5)
    weak = rows["multi30k", "Weak"]
    assert weak["verdict"] == "better" and weak["p"] < 0.05 < weak["p_holm"] and weak["holds_after_holm"] is False
    glove, noise = rows["multi30k", "GloVe"], rows["multi30k", "Noise1"]
    assert glove["verdict"] == "worse" and glove["holds_after_holm"] is True
    assert noise["verdict"] == "inconclusive" and noise["holds_after_holm"] is None
    alone = rows["sst2", "Weak"]     # the same differences, the only comparison of its task
    assert (alone["holm_m"], alone["p_holm"], alone["holds_after_holm"]) == (1, pytest.approx(alone["p"]), True)
    assert rows["multi30k", "Xavier"] is None


def test_every_format_marks_a_verdict_that_does_not_hold_after_holm():
    report = _report()
    md = report.to_markdown()
    assert "| p (Holm) | verdict |" in md

    def compared(start):   # the comparison table's line (it names the metric's direction), not Table 1's
        return next(line for line in md.splitlines() if line.startswith(start) and "is better)" in line)
    assert compared("| multi30k | Weak |").endswith("| better (not after Holm, m=5) |")
    assert compared("| multi30k | GloVe |").endswith("| worse |")
    assert compared("| sst2 | Weak |").endswith("| better |")
    assert "Holm's adjustment for the m comparisons with Xavier on the same task and metric" in md
    assert report_p_text(0.0496) != report_p_text(0.0504)   # either side of 0.05 stays apart
    table = {(r["task"], r["init"]): r for r in csv.DictReader(io.StringIO(report.to_csv()))}
    assert (table["multi30k", "Weak"]["holds_after_holm"], table["multi30k", "Weak"]["holm_m"]) == ("False", "5")
    assert table["multi30k", "GloVe"]["holds_after_holm"] == "True"
    assert table["multi30k", "Noise1"]["holds_after_holm"] == ""
    weak_json = next(r for r in report.rows if (r["task"], r["init"]) == ("multi30k", "Weak"))["vs_baseline"]
    assert float(table["multi30k", "Weak"]["p_holm"]) == pytest.approx(weak_json["p_holm"])
    tex = report.to_latex()
    weak_tex = next(line for line in tex.splitlines() if line.startswith("Weak &"))
    assert r"$^{(\uparrow)}$" in weak_tex.split("&")[1] and r"$^{\uparrow}$" in weak_tex.split("&")[2], weak_tex
    assert r"$^{\downarrow}$" in next(line for line in tex.splitlines() if line.startswith("GloVe &"))
    assert "In parentheses: not after Holm's correction" in tex


def test_an_ablations_cells_are_one_family():
    """The comparisons of every axes setting of a task and metric (an ablation's cells, one LaTeX column)
    are corrected together: 2 settings x 2 inits is a family of 4."""
    trials = []
    for pe in (False, True):
        axes = {"pos_encoding": pe}
        trials += [_trial(f"x{pe}{s}", "Xavier", s, v, "multi30k", axes) for s, v in enumerate(XAVIER)]
        for label in ("Weak", "Noise1"):
            trials += [_trial(f"{label}{pe}{s}", label, s, XAVIER[s] + d, "multi30k", axes)
                       for s, d in enumerate(DIFFS[label])]
    rows = [r for r in build_report("t", chosen={t.key: t for t in trials}, planned=[]).rows if r["vs_baseline"]]
    assert len(rows) == 4 and {r["vs_baseline"]["holm_m"] for r in rows} == {4}
    ps = [r["vs_baseline"]["p"] for r in rows]
    assert [r["vs_baseline"]["p_holm"] for r in rows] == pytest.approx(holm(ps))


def test_a_printed_p_value_never_rounds_across_the_significance_level():
    """An adjusted p of 0.04996 is significant (the verdict holds after Holm): printed "0.05" it would read
    as not significant. Three digits where they keep its side, more where they do not."""
    assert report_p_text(0.04996) == "0.04996" and report_p_text(0.0499996) == "0.0499996"
    assert report_p_text(0.05003) == "0.05" and report_p_text(0.05) == "0.05"   # not below 0.05 either way
    assert [report_p_text(p) for p in (0.0123456, 0.3, 0.0496, 1.0, 0.0004, None)] == [
        "0.0123", "0.3", "0.0496", "1", "<0.001", "-"]
    for p in (0.0449, 0.04951, 0.049949, 0.0499, 0.04999999):
        assert float(report_p_text(p)) < 0.05, p


def test_each_configuration_of_an_experiment_is_its_own_family():
    """Review C9: a spec run again with other epochs puts two configurations in one experiment; the report
    shows their rows apart and compares each with its own configuration's baseline, so Holm's family is one
    configuration's comparisons (m = 2 here, not 4 pooled over both)."""
    labels = {3: ("Weak", "Noise1"), 4: ("GloVe", "Noise2")}
    report = build_report("two", chosen={t.key: t for t in _configurations(labels)}, planned=[])
    rows = {r["init"]: r["vs_baseline"] for r in report.rows if r["init"] != "Xavier"}
    for epochs, inits in labels.items():
        ps = [stats.ttest_rel([x + d for x, d in zip(XAVIER, DIFFS[label])], XAVIER).pvalue for label in inits]
        for label, adjusted in zip(inits, holm(ps)):
            c = rows[label]
            assert (c["holm_m"], c["p_holm"]) == (2, pytest.approx(adjusted))
            assert c["holm_family"] == {"epochs": epochs}
    weak = rows["Weak"]   # p ~ 0.015: holds among its configuration's 2 tests (it would not among 4)
    assert weak["verdict"] == "better" and weak["p_holm"] < 0.05 and weak["holds_after_holm"] is True
    md = report.to_markdown()
    assert "The rows come from 2 configurations (differing in epochs): each configuration's comparisons are " \
           "their own family" in md
    assert "configurations" not in _report().to_markdown().split("Holm's adjustment")[1].split("\n")[0]


def test_a_verdict_not_after_holm_among_two_configurations_is_explained_per_configuration():
    """Review C9's caption: where a verdict is marked "not after Holm" and the comparisons come from two
    configurations of one experiment, the LaTeX caption says the correction is over the comparisons in the
    same column *and configuration*, and the markdown's Holm rule says each configuration is its own family.
    Weak (p ~ 0.015) is among 4 comparisons at epochs=3 (m = 4: not after Holm); GloVe is alone at epochs=4."""
    labels = {3: ("Weak", "Noise1", "Noise2", "Noise3"), 4: ("GloVe",)}
    report = build_report("two", chosen={t.key: t for t in _configurations(labels)}, planned=[])
    rows = {r["init"]: r["vs_baseline"] for r in report.rows if r["init"] != "Xavier"}
    weak = rows["Weak"]
    assert (weak["verdict"], weak["holds_after_holm"], weak["holm_m"], weak["holm_family"]) == (
        "better", False, 4, {"epochs": 3})
    assert (rows["GloVe"]["holm_m"], rows["GloVe"]["holm_family"]) == (1, {"epochs": 4})
    md = report.to_markdown()
    assert "| better (not after Holm, m=4) |" in next(line for line in md.splitlines()
                                                     if line.startswith("| multi30k | Weak |") and "is better)" in line)
    assert ("Holm's adjustment for the m comparisons with Xavier on the same task and metric (every axes "
            "setting). A verdict marked \"not after Holm\"") in md
    assert ("The rows come from 2 configurations (differing in epochs): each configuration's comparisons are "
            "their own family, m counts that configuration's only.") in md
    tex = report.to_latex()
    assert r"$^{(\uparrow)}$" in next(line for line in tex.splitlines() if line.startswith("Weak &"))
    assert ("In parentheses: not after Holm's correction for the comparisons with Xavier in the same column "
            "(task and metric, and configuration).") in tex
    # one configuration, a verdict not after Holm too: the caption names no configuration
    one = _report().to_latex()
    assert "In parentheses: not after Holm's correction for the comparisons with Xavier in the same column " \
           "(task and metric)." in one and "configuration" not in one


def _configurations(labels: dict[int, tuple[str, ...]]) -> list[TrialRecord]:
    """Multi30k trials of one experiment at two `epochs` (two configurations): Xavier and each of its
    labels (their seeds' test BLEU: XAVIER plus the label's DIFFS)."""
    def trial(key, label, seed, value, epochs):
        config = {"task": "multi30k", "init": label.lower(), "seed": seed, "epochs": epochs}
        return TrialRecord(key, key, "multi30k", label, "finished", config,
                           {"axes": {}, "point": {}, "selection": ["val/loss", "min"]},
                           {"best_epoch": 2, "test/bleu": value}, seed, start_ms=len(key))
    trials = []
    for epochs, inits in labels.items():
        trials += [trial(f"x{epochs}{s}", "Xavier", s, v, epochs) for s, v in enumerate(XAVIER)]
        for label in inits:
            trials += [trial(f"{label}{s}", label, s, XAVIER[s] + d, epochs) for s, d in enumerate(DIFFS[label])]
    return trials
