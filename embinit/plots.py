"""embinit's plotting, below the sweep, the report and the reproduction: per trial the validation curve
and the initial embedding values beside a Xavier table of the same shape (the paper's point: a
pretrained table's scale against Xavier's), logged to MLflow by the sweep; Figure 1, the validation
metric and the validation loss per init over epochs as the mean over seeds with the seeds' min-max
band, drawn by the report (embinit.report.plots); and `pyplot()`, matplotlib without a display, for
every figure embinit draws (the analyses' and the reproduction's too)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only), imported on first use."""
    import matplotlib  # only what plots pays the import
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def validation_curve(history: list[dict], path: Path, title: str, loss: str = "val/loss") -> Path | None:
    """The validation loss `loss` (left axis; the task's own, `task_registry.loss_metric`: MNLI logs
    val/loss_matched) and the task's validation metric (right axis) per epoch."""
    epochs = [h["epoch"] for h in history if loss in h]
    if not epochs:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(epochs, [h[loss] for h in history if loss in h], "o-", color="C0")
    epoch_axis(ax)
    ax.set_ylabel(loss, color="C0")
    other = sorted(k for k in history[-1] if k.startswith("val/") and k != loss)
    if other:
        ax2 = ax.twinx()
        ax2.plot(epochs, [h.get(other[0], math.nan) for h in history if loss in h], "s--", color="C1")
        ax2.set_ylabel(other[0], color="C1")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def init_histogram(values: np.ndarray, shape: tuple[int, int], path: Path, title: str) -> Path:
    """Histogram of the initial table's values beside Xavier's U(-a, a), a = sqrt(6/(N+D))."""
    plt = pyplot()
    bound = math.sqrt(6.0 / (shape[0] + shape[1]))
    xavier = np.random.default_rng(0).uniform(-bound, bound, size=min(values.size, 200_000))
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, data, name in ((axes[0], values, title), (axes[1], xavier, "Xavier (same N x D)")):
        ax.hist(data, bins=80, color="C0" if ax is axes[0] else "C2")
        ax.set_title(f"{name}\nstd {data.std():.3g}, range [{data.min():.3g}, {data.max():.3g}]", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def epoch_axis(ax) -> None:
    """An x axis of epochs: whole-number ticks only (no "epoch 1.4")."""
    from matplotlib.ticker import MaxNLocator
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def log_axis(ax) -> None:
    """A log-scale y axis labelled in plain numbers: a loss curve often spans less than a decade, where
    matplotlib's default labels its ticks "6.4x10^0"."""
    from matplotlib.ticker import FormatStrFormatter
    ax.set_yscale("log")
    for axis_ticks in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis_ticks(FormatStrFormatter("%.3g"))


def seed_band(histories: list[dict[int, float]]) -> tuple[list[int], list[float], list[float], list[float]]:
    """(epochs, mean, min, max) over the seeds' {epoch: value} histories, at each epoch some seed logged."""
    epochs = sorted({e for h in histories for e in h})
    at = [[h[e] for h in histories if e in h] for e in epochs]
    return epochs, [float(np.mean(v)) for v in at], [min(v) for v in at], [max(v) for v in at]


def seeds_text(histories: list[dict[int, float]]) -> str:
    """How many seeds each point of `seed_band`'s mean is over: "mean of 3 seeds", or where seeds stopped
    early (early stopping, divergence) and later epochs are over fewer, each change after the last epoch
    of the count before: "mean of 3 seeds; 2 after epoch 7; 1 after epoch 9"."""
    epochs = sorted({e for h in histories for e in h})
    counts = [sum(e in h for h in histories) for e in epochs]
    if not counts:
        return "no seeds"
    text = f"mean of {counts[0]} seed{'s' if counts[0] != 1 else ''}"
    for epoch, before, now in zip(epochs, counts, counts[1:]):
        if now != before:
            text += f"; {now} after epoch {epoch}"
    return text


_MARKERS, _LINES = "osD^vPX*", ("-", "--", "-.", ":")


def line_style(i: int) -> dict:
    """The `i`-th init's line: its own color, marker and dash, so two inits whose curves coincide (two
    that never learn, each at BLEU 0) still show as two (a color alone hides the one drawn first)."""
    return {"color": f"C{i % 10}", "marker": _MARKERS[i % len(_MARKERS)], "linestyle": _LINES[i % len(_LINES)]}


def figure1(panels: list[tuple[str, dict[str, list[dict[int, float]]]]], path: Path, title: str) -> Path:
    """One panel per (metric, {init label: seed histories}), side by side (e.g. val/bleu beside
    val/loss): per init the mean over seeds as a line and the seeds' min-max as a shaded band, each
    point over the seeds that logged that epoch; the legend says how many (`seeds_text`: fewer after a
    seed stopped early). The first panel has the legend, another one too where its counts differ."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    first_labels = None
    for ax, (metric, by_label) in zip(axes[0], panels):
        for i, (label, histories) in enumerate(by_label.items()):
            histories = [h for h in histories if h]
            if not histories:
                continue
            epochs, mean, low, high = seed_band(histories)
            style = line_style(i)
            ax.plot(epochs, mean, markersize=4, markerfacecolor="none", **style,
                    label=f"{label} ({seeds_text(histories)})")
            ax.fill_between(epochs, low, high, color=style["color"], alpha=0.2, linewidth=0)
        ax.set(ylabel=metric, title=metric)
        epoch_axis(ax)
        if metric.endswith("loss"):
            log_axis(ax)
        ax.grid(alpha=0.3)
        labels = ax.get_legend_handles_labels()[1]
        if first_labels is None or labels != first_labels:
            ax.legend(fontsize=8)
        first_labels = labels if first_labels is None else first_labels
    fig.suptitle(f"{title}  (band: min-max over the seeds that logged each epoch)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
