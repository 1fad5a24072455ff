"""The figures of the sections beyond the paper (embinit.reproduction.beyond), from the rows those
sections export: the metric against sigma per source with seed bands (min-max over the seeds, the mean
as the line), and the OOV rules side by side (one dot per seed, the mean as a bar across them). The
metrics both plot and their figure names live here; the sections import them (export -> figures, no cycle)."""

from __future__ import annotations

from pathlib import Path

from embinit.plots import pyplot

# (metric, its name in the document, +1 higher is better / -1 lower is better)
DOSE_METRICS = (("best/val/loss", "best val. loss", -1), ("test/loss", "test loss", -1),
                ("test/bleu", "test BLEU", 1))
OOV_METRICS = (("best/val/loss", "best val. loss", -1), ("test/bleu", "test BLEU", 1),
               ("oov/val_loss", "val. loss, OOV sentences", -1), ("oov/val_bleu", "val. BLEU, OOV sentences", 1),
               ("oov/test_loss", "test loss, OOV sentences", -1), ("oov/test_bleu", "test BLEU, OOV sentences", 1))
DOSE_FIGURE, OOV_FIGURE = "dose_response.png", "oov_rules.png"


def dose_figure(rows: list[dict], path: Path) -> Path | None:
    """A panel per metric of DOSE_METRICS some row has (no empty test BLEU panel for a classifier's rows)."""
    rows = [r for r in rows if r["multiple"] is not None and r["mean"] is not None]
    metrics = [m for m in DOSE_METRICS if any(r["metric"] == m[0] for r in rows)]
    if not metrics:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    axes = axes[0]
    for ax, (metric, name, _) in zip(axes, metrics):
        for src in dict.fromkeys(r["source"] for r in rows):
            pts = sorted((r["multiple"], r["mean"], r["min"], r["max"]) for r in rows
                         if r["metric"] == metric and r["source"] == src)
            if not pts:
                continue
            x, mean, lo, hi = zip(*pts)
            line, = ax.plot(x, mean, marker="o", label=src)
            ax.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_xlabel("σ / σ_Xavier")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def oov_figure(rows: list[dict], path: Path) -> Path | None:
    rows = [r for r in rows if r["mean"] is not None]
    metrics = [m for m in OOV_METRICS if any(r["metric"] == m[0] for r in rows)]
    if not metrics:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(2.6 * len(metrics), 3.2), squeeze=False)
    for ax, (metric, name, _) in zip(axes[0], metrics):
        cells = [r for r in rows if r["metric"] == metric]
        for i, r in enumerate(cells):
            seeds = list((r.get("values") or {}).values())
            ax.plot([i] * len(seeds), seeds, "o", color="#58a", alpha=0.7, markersize=4)
            ax.plot([i - 0.25, i + 0.25], [r["mean"]] * 2, color="k", linewidth=2)
        ax.set_xticks(range(len(cells)), [r["rule"] for r in cells], rotation=30, fontsize=8)
        ax.set_xlim(-0.6, len(cells) - 0.4)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(name, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def write_figures(exports: dict, out_dir: Path) -> list[Path]:
    """The PNGs of the sections that exported rows (`dose_response`, `oov_rules`) into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made = [dose_figure(exports.get("dose_response") or [], out_dir / DOSE_FIGURE),
            oov_figure(exports.get("oov_rules") or [], out_dir / OOV_FIGURE)]
    return [p for p in made if p is not None]
