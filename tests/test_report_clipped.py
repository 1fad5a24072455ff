"""The report's 95% interval is cut at the metric's range (a BLEU interval never goes below 0); where
that cuts it, a note under Table 1 gives the t interval, so a cut interval does not read as a narrow one."""

from __future__ import annotations

import csv
import io
import re

import pytest

from embinit.config import metric_range
from embinit.report.formatting import digits_by_metric
from embinit.report.notes import clipped_notes
from embinit.report.table import build_report, summarize
from embinit.tracking.records import TrialRecord


def _row(init, metric, values):
    return {"task": "multi30k", "init": init, "axes": {}, "setting": {}, "point": {}, "metric": metric,
            **summarize(values, metric_range(metric))}


def test_an_interval_cut_at_the_metric_s_range_is_named_with_its_t_interval():
    rows = [_row("Xavier", "test/bleu", [1.817, 2.463]),        # t interval [-1.963, 6.243]
            _row("GloVe", "test/bleu", [30.0, 32.0, 31.0]),      # inside [0, 100]: no note
            _row("Normal", "test/bleu", [3.0]),                  # n = 1: no interval, no note
            _row("Top", "best/val/acc", [0.99, 0.999])]           # cut at 1
    assert rows[0]["ci_low"] == 0.0 and rows[0]["ci95"] > rows[0]["mean"]
    notes = clipped_notes(rows, digits_by_metric(rows))
    assert notes[1].startswith("95% intervals cut at the metric's range"), notes
    assert notes[2:] == ["- multi30k Xavier (test/bleu): t interval [-1.96, 6.24], shown as [0.00, 6.24]",
                         "- multi30k Top (best/val/acc): t interval [0.9373, 1.0517], shown as [0.9373, 1.0000]"]
    assert clipped_notes(rows[1:3], digits_by_metric(rows)) == []


def test_the_csv_interval_is_the_clipped_one_and_the_half_width_says_it_is_not():
    """Review C6: the CSV's `ci95` was the unclipped half-width beside the clipped bounds, so mean ± ci95
    read 100.35 for a BLEU. The interval is `ci_low`/`ci_high`; the half-width is named as unclipped and
    `ci_clipped` says where the two disagree."""
    def trial(key, label, seed, value):
        return TrialRecord(key, key, "multi30k", label, "finished",
                           {"task": "multi30k", "init": label.lower(), "seed": seed, "epochs": 20},
                           {"axes": {}, "point": {}, "selection": ["val/loss", "min"]},
                           {"best_epoch": 5, "test/bleu": value}, seed, start_ms=len(key))
    trials = [trial(f"x{s}", "Xavier", s, v) for s, v in enumerate([99.7, 99.9, 100.0])]
    trials += [trial(f"g{s}", "GloVe", s, v) for s, v in enumerate([30.0, 32.0, 31.0])]
    report = build_report("t", chosen={t.key: t for t in trials}, planned=[])
    table = {r["init"]: r for r in csv.DictReader(io.StringIO(report.to_csv()))}
    assert "ci95" not in table["Xavier"]
    x, g = table["Xavier"], table["GloVe"]
    mean, half = float(x["mean"]), float(x["ci95_half_width_unclipped"])
    assert mean + half > 100.0 and float(x["ci_high"]) == 100.0 and x["ci_clipped"] == "True"
    assert float(x["ci_low"]) == pytest.approx(mean - half)
    assert g["ci_clipped"] == "False" and float(g["ci_high"]) == pytest.approx(
        float(g["mean"]) + float(g["ci95_half_width_unclipped"]))


def test_an_exploding_perplexity_prints_with_an_exponent_not_forty_digits():
    """An lr at which a language model blows up without diverging to inf left test/ppl at ~1e39: the table,
    its clipped-interval note, the comparison and the LaTeX cell each printed it with 40 digits."""
    def trial(key, label, seed, value):
        return TrialRecord(key, key, "synthetic_lm", label, "finished", {"task": "synthetic_lm", "seed": seed},
                           {"axes": {}, "point": {}, "selection": ["val/ppl", "min"]},
                           {"best_epoch": 1, "test/ppl": value}, seed, start_ms=seed)
    trials = [trial(f"x{s}", "Xavier", s, v) for s, v in enumerate([3.5e39, 1.7e28, 4.0])]
    trials += [trial(f"n{s}", "Normal", s, v) for s, v in enumerate([3.0, 3.2, 3.1])]
    report = build_report("t", chosen={t.key: t for t in trials}, planned=[])
    text, latex = report.to_markdown(), report.to_latex()
    assert "| synthetic_lm | Xavier | test/ppl | 1.17e+39 (2.02e+39) | 3 |" in text
    assert "- synthetic_lm Xavier (test/ppl): t interval [-3.85e+39, 6.19e+39], shown as [1.00, 6.19e+39]" in text
    assert "| synthetic_lm | Normal | test/ppl (lower is better) | -1.17e+39 | [-6.19e+39, 3.85e+39] |" in text
    assert "Xavier & 1.17e+39 (2.02e+39)" in latex and "Normal & \\textbf{3.10} (0.10)" in latex
    assert re.search(r"\d{10}", text + latex) is None, re.search(r".{40}\d{10}", text + latex)
