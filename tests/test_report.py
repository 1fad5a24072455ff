"""Table 1 from MLflow: grouping per task x init (x axes), mean/σ/n/95% CI, best search point, failed and
diverged counts, the three formats and the Figure-1 plot. Runs are written with embinit.tracking.trial_run into a
temporary SQLite store; the numbers are inputs chosen so the expected statistics are known."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import pytest

from embinit.tracking import mlflow_store, trial_run
from embinit.config import metric_range
from embinit.report.table import build_report, summarize, t_quantile
from embinit.plots import figure1 as _real_figure1

pytestmark = pytest.mark.slow  # creating an MLflow SQLite store takes a few seconds


def test_t_quantile_matches_tables():
    assert t_quantile(1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(2) == pytest.approx(4.303, abs=1e-3)
    assert t_quantile(30) == pytest.approx(2.042, abs=1e-3)


def test_summarize():
    s = summarize([0.7, 0.8, 0.9])
    assert s["n"] == 3 and s["mean"] == pytest.approx(0.8) and s["std"] == pytest.approx(0.1)
    assert s["ci95"] == pytest.approx(4.303 * 0.1 / math.sqrt(3), rel=1e-3)
    assert summarize([1.0]) == {"n": 1, "mean": 1.0, "std": None, "ci95": None, "ci_low": None,
                                "ci_high": None}
    assert summarize([])["mean"] is None


def test_ci_is_clipped_to_the_metric_range():
    # three BLEU scores near the top: the t interval [mean - 12.5, mean + 12.5] would pass 100
    s = summarize([99.0, 100.0, 94.0], (0.0, 100.0))
    assert s["mean"] + s["ci95"] > 100
    assert s["ci_high"] == 100.0 and s["ci_low"] == pytest.approx(s["mean"] - s["ci95"])
    assert summarize([0.01, 0.3, 0.02], metric_range("best/val/acc"))["ci_low"] == 0.0


def test_metric_ranges():
    assert metric_range("test/bleu") == (0.0, 100.0)
    assert metric_range("best/val/acc_mismatched") == (0.0, 1.0)
    assert metric_range("test/ppl")[0] == 1.0 and metric_range("val/loss") == (0.0, math.inf)
    assert metric_range("init/emb/std") == (-math.inf, math.inf)


def _add(uri, exp, key, label, seed, acc, *, status="finished", axes=None, point=None, epoch=2, curve=None,
         **cfg_extra):
    cfg = {"task": "synthetic_classification", "init": label.lower(), "seed": seed, **cfg_extra}
    group = {"axes": axes or {}, "point": point or {}, "selection": ["val/acc", "max"]}
    run = trial_run.TrialRun.open(uri, exp, None, cfg, key, label, group)
    if status == "failed":
        run.fail("Traceback (most recent call last):\nRuntimeError: out of memory")
        return
    history = [{"epoch": e, "val/loss": 1.0, "val/acc": v} for e, v in enumerate(curve or [acc], start=1)]
    for h in history:
        run.log_epoch(h["epoch"], h)
    run.finish({"status": status, "history": history,
                "best": {} if status == "diverged" else {"val/acc": acc, "val/acc_epoch": epoch},
                "best_epoch": epoch}, [])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    exp = mlflow_store.ensure_experiment("rep", uri)
    for seed, acc in enumerate([0.7, 0.8, 0.9]):
        _add(uri, exp, f"x{seed}", "Xavier", seed, acc, epoch=seed + 1, curve=[0.5, acc])
    for seed, acc in enumerate([0.6, 0.65]):
        _add(uri, exp, f"g{seed}", "GloVe", seed, acc, curve=[0.3, acc])
    _add(uri, exp, "g2", "GloVe", 2, None, status="diverged")
    _add(uri, exp, "g3", "GloVe", 3, None, status="failed")
    # a grid search: lr point 1e-3 has the better mean over its two seeds
    for seed, (lo, hi) in enumerate([(0.5, 0.75), (0.55, 0.85)]):
        _add(uri, exp, f"s-lo{seed}", "Normal", seed, lo, point={"lr": 1e-4})
        _add(uri, exp, f"s-hi{seed}", "Normal", seed, hi, point={"lr": 1e-3})
    # an ablation axis: one row per setting
    _add(uri, exp, "a-on", "XavierNormal", 0, 0.9, axes={"pos_encoding": True})
    _add(uri, exp, "a-off", "XavierNormal", 0, 0.4, axes={"pos_encoding": False})
    return uri


def test_a_label_with_two_configurations_gets_two_rows(store):
    # the same spec from the CLI and from the service: same seeds, another pretrained path
    exp = mlflow_store.ensure_experiment("two-paths", store)
    for seed, acc in enumerate([0.7, 0.8, 0.9]):
        _add(store, exp, f"cli{seed}", "GloVe", seed, acc, pretrained="/home/me/glove.txt")
        _add(store, exp, f"svc{seed}", "GloVe", seed, acc - 0.5, pretrained="/srv/pretrained/glove.txt",
             lr=1e-3)  # lr given explicitly = the task default: not a difference
    report = build_report("two-paths", store)
    assert [(r["setting"], r["n"]) for r in report.rows] == [
        ({"pretrained": "/home/me/glove.txt"}, 3), ({"pretrained": "/srv/pretrained/glove.txt"}, 3)]
    assert report.rows[0]["mean"] == pytest.approx(0.8) and report.rows[1]["mean"] == pytest.approx(0.3)
    md = report.to_markdown()
    assert "synthetic_classification GloVe: 2 configurations that differ in pretrained" in md
    assert "GloVe {pretrained=/home/me/glove.txt}" in md


def test_each_trial_key_and_each_seed_counts_once(store):
    exp = mlflow_store.ensure_experiment("reruns", store)
    for seed, acc in enumerate([0.7, 0.8, 0.9]):
        _add(store, exp, f"k{seed}", "Xavier", seed, acc)
    _add(store, exp, "k0", "Xavier", 0, 0.75)                 # the same key finished twice (a rerun)
    _add(store, exp, "k1-old", "Xavier", 1, 0.1)              # seed 1 again under another key (older code)
    _add(store, exp, "k1-new", "Xavier", 1, 0.85)
    _add(store, exp, "k2-failed", "Xavier", 2, None, status="failed")  # a finished seed 2 exists
    (row,) = build_report("reruns", store).rows
    assert row["n"] == 3 and row["mean"] == pytest.approx((0.75 + 0.85 + 0.9) / 3)
    assert row["failed"] == 0


def _rows(report):
    return {(r["init"], json.dumps(r["axes"], sort_keys=True)): r for r in report.rows}


def test_rows_per_task_init_and_axes(store):
    rows = _rows(build_report("rep", store))
    x = rows[("Xavier", "{}")]
    assert (x["task"], x["metric"], x["n"]) == ("synthetic_classification", "best/val/acc", 3)
    assert x["mean"] == pytest.approx(0.8) and x["std"] == pytest.approx(0.1)
    assert x["ci95"] == pytest.approx(4.303 * 0.1 / math.sqrt(3), rel=1e-3)
    assert x["best_epoch"] == pytest.approx(2.0)          # mean of epochs 1, 2, 3
    g = rows[("GloVe", "{}")]
    assert g["n"] == 2 and g["mean"] == pytest.approx(0.625)
    assert g["diverged"] == 1 and g["failed"] == 1
    assert g["failure_reasons"] == {"RuntimeError: out of memory": 1}
    assert rows[("XavierNormal", '{"pos_encoding": true}')]["mean"] == pytest.approx(0.9)
    assert rows[("XavierNormal", '{"pos_encoding": false}')]["mean"] == pytest.approx(0.4)


def test_search_reports_the_best_mean_point(store):
    normal = _rows(build_report("rep", store))[("Normal", "{}")]
    assert normal["point"] == {"lr": 1e-3}
    assert normal["n"] == 2 and normal["mean"] == pytest.approx(0.8)


def test_keys_restrict_the_report(store):
    report = build_report("rep", store, keys={"x0", "x1"})
    assert [(r["init"], r["n"]) for r in report.rows] == [("Xavier", 2)]


def test_formats(store):
    report = build_report("rep", store)
    md = report.to_markdown()
    assert "| synthetic_classification | Xavier | best/val/acc | 0.8000 (0.1000) | 3 |" in md   # a fraction: 4 places
    assert "Failed trials: 1" in md and "RuntimeError: out of memory" in md
    assert "pos_encoding=False" in md and "[lr=0.001]" in md
    table = list(csv.DictReader(io.StringIO(report.to_csv())))
    assert len(table) == len(report.rows) and {"mean", "std", "n", "ci_low", "ci_high", "best_epoch"} <= set(table[0])
    data = json.loads(report.to_json())
    assert data["experiment"] == "rep" and len(data["rows"]) == len(report.rows)
    assert data["failed"][0]["init"] == "GloVe"


def test_rows_put_xavier_first(store):
    labels = [r["init"] for r in build_report("rep", store).rows]
    assert labels[0] == "Xavier"


def test_plot_writes_mean_curves(store, tmp_path, monkeypatch):
    from embinit import plots
    drawn = []
    monkeypatch.setattr(plots, "figure1", lambda panels, path, title: drawn.append(panels) or
                        _real_figure1(panels, path, title))
    paths = build_report("rep", store).plot(tmp_path)
    assert paths and all(p.exists() and p.stat().st_size > 1000 for p in paths)
    assert {p.name for p in paths} >= {"synthetic_classification.png"}
    (panels,) = [p for p in drawn if "Xavier" in p[0][1]]
    assert [metric for metric, _ in panels] == ["val/acc", "val/loss"]   # the loss beside the metric
    assert panels[0][1]["Xavier"] == [{1: 0.5, 2: 0.7}, {1: 0.5, 2: 0.8}, {1: 0.5, 2: 0.9}]  # per seed


def test_mnli_curves_show_its_own_validation_loss(tmp_path, monkeypatch):
    # MNLI logs a loss per split (val/loss_matched, val/loss_mismatched), no val/loss: the report's
    # Figure 1 drew an empty val/loss panel, and no trial got a plots/val_curve.png
    from types import SimpleNamespace
    from embinit import plots
    from embinit.sweep.reporting import artifacts
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = mlflow_store.ensure_experiment("mnli", uri)
    history = [{"epoch": e, "val/loss_matched": 1.0 / e, "val/acc_matched": 0.3 * e, "val/loss_mismatched": 1.1 / e,
                "val/acc_mismatched": 0.3 * e} for e in (1, 2)]
    for seed in range(2):
        run = trial_run.TrialRun.open(uri, exp, None, {"task": "mnli", "init": "xavier", "seed": seed}, f"m{seed}",
                                      "Xavier", {"axes": {}, "point": {}, "selection": ["val/acc_matched", "max"]})
        for h in history:
            run.log_epoch(h["epoch"], h)
        run.finish({"status": "finished", "history": history, "best_epoch": 2,
                    "best": {"val/acc_matched": 0.6, "val/acc_matched_epoch": 2}}, [])
    drawn = []
    monkeypatch.setattr(plots, "figure1", lambda panels, path, title: drawn.append(panels) or
                        _real_figure1(panels, path, title))
    assert [p.name for p in build_report("mnli", uri).plot(tmp_path / "figures")] == ["mnli.png"]
    (panels,) = drawn
    assert [metric for metric, _ in panels] == ["val/acc_matched", "val/loss_matched"]
    assert panels[1][1]["Xavier"] == [{1: 1.0, 2: 0.5}] * 2   # per seed, not empty
    ctx = SimpleNamespace(log_checkpoint=False, log_plots=True, log_outputs=False)
    files = artifacts({"config": {"task": "mnli"}, "history": history}, tmp_path, ctx, "Xavier")
    assert ("plots", str(tmp_path / "val_curve.png")) in files


def test_a_figure_has_no_panel_for_a_metric_no_run_logged(tmp_path, monkeypatch):
    """Translation trials that computed no validation BLEU got Figure 1 with an empty val/bleu panel beside
    val/loss; the panel is left out."""
    from embinit import plots
    uri = _one_trial(tmp_path, "nobleu", "synthetic_translation", {},
                     [{"epoch": e, "val/loss": 1.0 / e} for e in (1, 2)], ("val/loss", "min"))
    drawn = []
    monkeypatch.setattr(plots, "figure1", lambda panels, path, title: drawn.append(panels) or
                        _real_figure1(panels, path, title))
    assert [p.name for p in build_report("nobleu", uri).plot(tmp_path / "figures")] == ["synthetic_translation.png"]
    assert [[metric for metric, _ in panels] for panels in drawn] == [["val/loss"]]


def test_the_beyond_figures_have_no_panel_for_a_metric_no_row_has(tmp_path, monkeypatch):
    """The dose-response figure drew all of val. loss, test loss and test BLEU: a classifier's rows left an
    empty test BLEU panel. An OOV figure of one metric failed (one panel is no array of axes)."""
    from types import SimpleNamespace

    from embinit.reproduction import beyond_figures as bf
    drawn, real = [], bf.pyplot

    def spy():
        plt = real()
        return SimpleNamespace(subplots=lambda *a, **kw: drawn.append(plt.subplots(*a, **kw)) or drawn[-1],
                               close=plt.close)
    monkeypatch.setattr(bf, "pyplot", spy)
    dose = [{"multiple": m, "mean": 1.0, "min": 0.9, "max": 1.1, "metric": metric, "source": "GloVe"}
            for m in (0.25, 1.0) for metric in ("best/val/loss", "test/loss")]
    assert bf.dose_figure(dose, tmp_path / "d.png") == tmp_path / "d.png"
    assert [ax.get_title() for ax in drawn[-1][0].axes] == ["best val. loss", "test loss"]
    oov = [{"metric": "best/val/loss", "mean": 1.0, "rule": rule, "values": {"0": 1.0}} for rule in ("xavier", "mean")]
    assert bf.oov_figure(oov, tmp_path / "o.png") == tmp_path / "o.png"
    assert [ax.get_title() for ax in drawn[-1][0].axes] == ["best val. loss"]


def test_seed_band():
    from embinit.plots import seed_band
    epochs, mean, low, high = seed_band([{1: 1.0, 2: 4.0}, {1: 3.0, 2: 2.0}, {1: 2.0}])
    assert epochs == [1, 2] and mean == [2.0, 3.0] and low == [1.0, 2.0] and high == [3.0, 4.0]


def test_figure1_says_how_many_seeds_each_point_is_over(tmp_path, monkeypatch):
    """Each epoch's mean is over the seeds that logged it: after a seed stopped early (early stopping) the
    later points are over fewer, which the legend said nothing of ("mean of 3 seeds" throughout)."""
    from types import SimpleNamespace

    from embinit import plots
    real, closed = plots.pyplot(), []
    monkeypatch.setattr(plots, "pyplot", lambda: SimpleNamespace(subplots=real.subplots, close=closed.append))
    full = {e: 1.0 / e for e in range(1, 11)}
    stopped = [full, full, {e: v for e, v in full.items() if e <= 7}]   # the third seed stopped after epoch 7
    plots.figure1([("val/bleu", {"Xavier": [full] * 3, "GloVe": stopped}),
                   ("val/loss", {"Xavier": [full] * 3, "GloVe": [full, {1: 1.0, 2: 0.5}]})], tmp_path / "f.png", "t")
    (fig,) = closed
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else None for ax in fig.axes]
    real.close(fig)
    assert legends[0] == ["Xavier (mean of 3 seeds)", "GloVe (mean of 3 seeds; 2 after epoch 7)"]
    assert legends[1] == ["Xavier (mean of 3 seeds)", "GloVe (mean of 2 seeds; 1 after epoch 2)"]   # counts differ
    assert plots.seeds_text([{1: 0.0, 2: 0.0}, {1: 0.0}, {1: 0.0}]) == "mean of 3 seeds; 1 after epoch 1"


def test_curve_axes_read_as_epochs_and_plain_losses():
    """A 2-epoch curve: ticks at whole epochs only, and a loss that spans less than a decade on its log
    axis labelled as numbers (matplotlib's default writes "6.4x10^0")."""
    from embinit import plots
    plt = plots.pyplot()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [6.74, 6.06])
    plots.epoch_axis(ax)
    plots.log_axis(ax)
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    assert [t for t in ax.get_xticks() if lo <= t <= hi] == [1.0, 2.0]
    labels = [t.get_text() for t in ax.get_yticklabels(which="both") if t.get_text()]
    plt.close(fig)
    assert labels and all(re.fullmatch(r"\d+(\.\d+)?", text) for text in labels), labels


def test_a_long_failure_reason_is_cut_with_an_ellipsis_that_says_so():
    """A reason over 200 characters was cut mid-word with no mark (the fix hint at its end lost unseen)."""
    from embinit.report.rows import failure_reason
    long = "EmbinitError: " + "x" * 250 + " (give --data-dir)"
    cut = failure_reason("Traceback (most recent call last):\n  ...\n" + long)
    assert len(cut) == 200 and cut.endswith("…") and cut[:-1] == long[:199]
    assert failure_reason("OSError: short") == "OSError: short" and failure_reason(None) == "unknown error"


def test_a_figure_s_title_writes_its_axes_as_the_table_does(tmp_path, monkeypatch):
    """A figure per axes setting is titled with the setting as the table's rows write it, `pos_encoding=False`,
    not its JSON (`{"pos_encoding": false}`)."""
    from embinit import plots
    uri = _one_trial(tmp_path, "axes", "synthetic_classification", {"pos_encoding": False},
                     [{"epoch": e, "val/loss": 1.0 / e, "val/acc": 0.3 * e} for e in (1, 2)], ("val/acc", "max"))
    titles = []
    monkeypatch.setattr(plots, "figure1", lambda panels, path, title: titles.append(title) or
                        _real_figure1(panels, path, title))
    build_report("axes", uri).plot(tmp_path / "figures")
    assert titles == ["axes: synthetic_classification pos_encoding=False"]


def _one_trial(tmp_path, experiment: str, task: str, axes: dict, history: list[dict], selection: tuple) -> str:
    """A store (its URI) with one finished Xavier trial of `task` at `axes`, its epochs `history`."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = mlflow_store.ensure_experiment(experiment, uri)
    run = trial_run.TrialRun.open(uri, exp, None, {"task": task, "init": "xavier", "seed": 0}, "k0", "Xavier",
                                  {"axes": axes, "point": {}, "selection": list(selection)})
    for h in history:
        run.log_epoch(h["epoch"], h)
    metric = selection[0]
    run.finish({"status": "finished", "history": history, "best_epoch": 2, "best": {metric: history[-1][metric]}}, [])
    return uri
