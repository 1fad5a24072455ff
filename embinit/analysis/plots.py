"""Figures of the analyses, written as PNG files (for MLflow artifacts and reports).

`similarity_figure(curve, path)`: KNN match similarity over training steps (the blog post's plot),
optionally beside the perplexity curve on a second axis. `curve` is what `similarity_curve` or a
`SimilarityCallback.history` holds: dicts with `step` and a value (`mean` or a `sim/...` metric).
"""

from __future__ import annotations

from pathlib import Path

from embinit.errors import EmbinitError
from embinit.plots import pyplot


def _values(curve: list[dict]) -> tuple[list[int], list[float]]:
    if not curve:
        raise EmbinitError("nothing to plot: the similarity curve is empty")
    key = "mean" if "mean" in curve[0] else next((k for k in curve[0] if k.endswith("_mean")), None)
    if key is None:
        raise EmbinitError(f"no similarity value in the curve's entries (keys: {sorted(curve[0])})")
    return [int(c["step"]) for c in curve], [float(c[key]) for c in curve]


def similarity_figure(curve: list[dict], path: str | Path, title: str = "KNN match similarity",
                      perplexity: list[tuple[int, float]] | None = None) -> Path:
    """Write the figure to `path` and return it. perplexity: optional (step, ppl) points."""
    plt = pyplot()
    steps, values = _values(curve)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, values, marker="o", markersize=3, color="tab:blue", label="KNN match similarity")
    ax.set_xlabel("training step")
    ax.set_ylabel("similarity", color="tab:blue")
    ax.set_ylim(0, max(0.05, max(values) * 1.15))
    if perplexity:
        ax2 = ax.twinx()
        ax2.plot([s for s, _ in perplexity], [p for _, p in perplexity], color="tab:red", marker="s",
                 markersize=3, label="validation perplexity")
        ax2.set_ylabel("perplexity", color="tab:red")
        ax2.set_yscale("log")
    ax.set_title(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
