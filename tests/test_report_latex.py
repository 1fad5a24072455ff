"""`embinit report --format latex`: the report's rows as the paper's Table 1 for a manuscript. Rows are
built as `embinit.report.table` builds them (with `report_baseline.compare_rows` for the verdicts), so each
mark is checked against the numbers it stands for; where pdflatex is installed the table compiles."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from embinit.report import baseline as report_baseline
from embinit.report.table import summarize
from embinit.report.latex import escape, to_latex


def _row(task, init, metric, seeds, axes=None, point=None, last=False):
    return {"task": task, "init": init, "axes": axes or {}, "setting": {}, "point": point or {}, "metric": metric,
            **summarize(list(seeds.values())), "seeds": seeds, "still_improving": last}


def _rows():
    rows = [
        _row("multi30k", "Xavier", "test/bleu", {"0": 30.0, "1": 32.0, "2": 31.0}),
        _row("multi30k", "GloVe", "test/bleu", {"0": 20.0, "1": 22.5, "2": 20.5}, last=True),
        _row("multi30k", "GloVe_Xavier", "test/bleu", {"0": 34.0, "1": 35.0, "2": 33.0}),  # differences 4, 3, 2
        _row("wikitext2", "Xavier", "test/ppl", {"0": 200.0, "1": 210.0, "2": 205.0}),
        _row("wikitext2", "GloVe", "test/ppl", {"0": 180.0, "1": 185.0}),      # one seed short
        _row("wikitext2", "GloVe_Xavier", "test/ppl", {"0": 170.0, "1": 172.0, "2": 171.0}),
        _row("wikitext2", "GloVe_Shuffled", "test/ppl", {}),                    # none finished
    ]
    report_baseline.compare_rows(rows, "Xavier")
    return rows


def _body(tex: str) -> dict[str, list[str]]:
    """{first cell: the other cells} of the tabular's rows between \\midrule and \\bottomrule."""
    body = tex.split("\\midrule\n", 1)[1].split("\\bottomrule", 1)[0]
    cells = [line.removesuffix(" \\\\").split(" & ") for line in body.strip().splitlines()]
    return {c[0]: c[1:] for c in cells}


def test_one_row_per_init_one_column_per_task_and_metric():
    tex = to_latex("paper-table1", _rows(), "Xavier")
    assert "\\begin{tabular}{lcc}" in tex
    header = next(line for line in tex.splitlines() if line.startswith("Init & "))
    assert header == "Init & multi30k BLEU $\\uparrow$ & wikitext2 PPL $\\downarrow$ \\\\"
    body = _body(tex)
    assert list(body) == ["Xavier", "GloVe", "GloVe\\_Xavier", "GloVe\\_Shuffled"]
    assert all(len(cells) == 2 for cells in body.values())
    assert body["Xavier"] == ["31.00 (1.00)", "205.00 (5.00)"]


def test_marks_stand_for_the_best_mean_the_verdict_the_budget_and_the_seed_count():
    rows = _rows()
    body = _body(to_latex("t", rows, "Xavier"))
    by = {(r["init"], r["task"]): r for r in rows}
    assert by[("GloVe", "multi30k")]["vs_baseline"]["verdict"] == "worse"
    assert body["GloVe"][0] == "21.00 (1.32)$^{\\downarrow\\dagger}$"           # worse, still improving
    assert by[("GloVe_Xavier", "multi30k")]["vs_baseline"]["verdict"] == "better"
    assert body["GloVe\\_Xavier"][0] == "\\textbf{34.00} (1.00)$^{\\uparrow}$"   # BLEU: higher is best
    # perplexity: the lowest mean is the best, and lower than Xavier is "better" (↑)
    assert by[("GloVe_Xavier", "wikitext2")]["vs_baseline"]["verdict"] == "better"
    assert body["GloVe\\_Xavier"][1] == "\\textbf{171.00} (1.00)$^{\\uparrow}$"
    assert by[("GloVe", "wikitext2")]["vs_baseline"]["verdict"] == "inconclusive"   # two pairs only
    assert body["GloVe"][1] == "182.50 (3.54)$_{n=2}$"
    assert body["GloVe\\_Shuffled"] == ["--", "--"]   # no finished seed; no multi30k row at all
    assert body["Xavier"][1] == "205.00 (5.00)"   # the baseline carries no verdict mark


def test_the_caption_explains_every_mark_it_uses_and_names_the_baseline():
    tex = to_latex("t", _rows(), "GloVe")
    caption = re.search(r"\\caption\{(.*)\}", tex).group(1)
    assert "over 3 seeds" in caption and "better/worse than GloVe" in caption
    assert "\\dagger$: the best epoch was the last" in caption and "$n$: the number of seeds" in caption
    assert "--: no finished seed" in caption
    plain = to_latex("t", [_row("sst2", "Xavier", "test/acc", {"0": 0.8, "1": 0.82})], "Xavier")
    caption = re.search(r"\\caption\{(.*)\}", plain).group(1)
    assert "dagger" not in caption and "$n$" not in caption and "better/worse" not in caption


def test_the_caption_of_a_one_seed_table_says_seed_not_seeds():   # `embinit run SPEC seeds=1`, a smoke test
    tex = to_latex("t", [_row("sst2", "Xavier", "best/val/acc", {"0": 0.8})], "Xavier")
    caption = re.search(r"\\caption\{(.*)\}", tex).group(1)
    assert "mean (standard deviation) over 1 seed;" in caption


def test_search_points_axes_and_labels_are_escaped_and_listed():
    rows = [_row("mnli", "GloVe_Xavier", "test/acc_matched", {"0": 0.6, "1": 0.62},
                 axes={"sigma": "4x"}, point={"lr": 0.0001, "dropout": 0.1})]
    tex = to_latex("grid_100%", rows, "Xavier")
    assert "% embinit report grid_100%" in tex.splitlines()[0]    # a LaTeX comment line: kept as is
    assert "\\caption{grid\\_100\\%: " in tex
    assert "GloVe\\_Xavier sigma=4x & " in tex
    assert "mnli Acc. (m) (\\%) $\\uparrow$" in tex and "& \\textbf{61.00} (1.41) \\\\" in tex   # percent
    assert "Best search point per init: GloVe\\_Xavier on mnli: lr=0.0001, dropout=0.1." in tex
    assert escape("a_b&c%d$e#f{g}h~i^j\\k") == ("a\\_b\\&c\\%d\\$e\\#f\\{g\\}h\\textasciitilde{}i"
                                                 "\\textasciicircum{}j\\textbackslash{}k")


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed (apt: texlive-latex-"
                    "recommended); the table's structure is checked above")
def test_the_table_compiles(tmp_path):
    doc = ("\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n"
           + to_latex("t", _rows(), "Xavier") + "\\end{document}\n")
    (tmp_path / "t.tex").write_text(doc)
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "t.tex"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:]
    assert (tmp_path / "t.pdf").stat().st_size > 0
