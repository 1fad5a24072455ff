"""The spec's `analyses` in a sweep: trainer callbacks (embinit.analysis.callbacks) that log the
position probe and the KNN match similarity to the trial's MLflow run.

The settings travel in the sweep's `shared` dict beside the TrialConfig, never inside it: the analyses
only observe training, so they must not change the trial key (a finished trial is reused as it is,
without re-running to add an analysis).

Similarity against another seed (the blog's experiment 1): every trial writes its K-NN snapshots to
`<snapshot_dir>/<trial key>/`; a trial whose seed is not `reference_seed` compares, step by step, with
the folder of its twin -- the same config at `reference_seed`. With `reference_emb_seed` instead, the
twin is the same config (same trial seed) at that embedding seed: the two runs differ only in their
tables' init, as in the blog's code. The folder must be visible to every worker (local Ray, or a shared
filesystem on a cluster).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable


def shared_settings(spec) -> dict[str, Any] | None:
    """The spec's analyses as a plain dict for the workers, paths made absolute (workers run in
    other directories); None when the spec has none."""
    if spec.analyses is None:
        return None
    data = spec.analyses.model_dump()
    sim = data.get("similarity")
    if sim is not None:
        if (sim["reference_seed"] is not None or sim.get("reference_emb_seed") is not None
                or sim["snapshot_dir"] is not None):
            root = sim["snapshot_dir"] or Path(spec.cache_dir or ".embinit-cache") / "knn_snapshots"
            # absolute, symlinks kept: the trial resolves and checks them when it writes (embinit.trusted)
            sim["snapshot_dir"] = os.path.abspath(Path(root).expanduser())
        ref = sim["reference"]
        if ref is not None and Path(ref).expanduser().exists():   # else an MLflow run id
            sim["reference"] = os.path.abspath(Path(ref).expanduser())
    return data


def trial_callbacks(settings: dict[str, Any] | None, cfg, log_fn: Callable[[dict, int], None],
                    out_dir: Path) -> list:
    """The callbacks of one trial (`cfg`: its TrialConfig), logging through `log_fn(metrics, step)`."""
    if not settings:
        return []
    from embinit.analysis.callbacks import make_callbacks  # torch; workers only
    wanted: dict[str, Any] = {}
    sim = settings.get("similarity")
    if sim is not None:
        wanted["similarity"] = _similarity_args(sim, cfg)
    probe = settings.get("probe")
    if probe is not None:
        wanted["probe"] = {"every_n_epochs": probe["every_n_epochs"], "max_len": probe["max_len"],
                           "n_samples": probe["n_samples"], "summary": True}
    out = make_callbacks(wanted, log_fn=log_fn, out_dir=out_dir)
    return out + [EpochSteps()] if sim is not None else out


def _similarity_args(sim: dict[str, Any], cfg) -> dict[str, Any]:
    args = {"every_n_steps": sim["every_n_steps"], "k": sim["k"], "metric": sim["metric"],
            "neighbours": sim["neighbours"], "wait_s": sim["wait_s"], "reference": sim["reference"]}
    root = sim["snapshot_dir"]
    if root is not None:
        args["snapshot_dir"] = Path(root) / cfg.key()
        twin = _twin(sim, cfg)
        if twin is not None:
            args["reference_snapshots"] = Path(root) / twin
    return args


def _twin(sim: dict[str, Any], cfg) -> str | None:
    """The key of the trial whose snapshots `cfg`'s trial compares with; None for the reference itself."""
    ref_seed, ref_emb = sim["reference_seed"], sim.get("reference_emb_seed")
    if ref_seed is not None and cfg.seed != ref_seed:
        return twin_key(cfg, ref_seed)
    if ref_emb is not None and emb_seed_of(cfg) != ref_emb:
        return dataclasses.replace(cfg, emb_seed=ref_emb).key()
    return None


def emb_seed_of(cfg) -> int:
    return cfg.seed if cfg.emb_seed is None else cfg.emb_seed


def twin_key(cfg, seed: int) -> str:
    """The trial key of the same config at another seed (whose snapshots a trial compares with)."""
    return dataclasses.replace(cfg, seed=seed).key()


class EpochSteps:
    """Trainer callback: the optimizer step at each epoch's end, to put per-epoch perplexity on the
    similarity figure's step axis."""

    def __init__(self):
        self.steps: dict[int, int] = {}

    def on_epoch_end(self, ctx, epoch: int, metrics: dict) -> None:
        self.steps[epoch] = ctx.step


def plot_artifacts(callbacks: list, history: list[dict], out_dir: Path, label: str) -> list[tuple[str, str]]:
    """[("plots", similarity_curve.png)]: the similarity curve this attempt measured, with validation
    perplexity on a second axis for LMs; [] when there is nothing to plot. (A resumed attempt plots the
    steps since its restart; MLflow's `sim/*` history holds them all.)"""
    from embinit.analysis.callbacks import SimilarityCallback
    from embinit.analysis.plots import similarity_figure
    sim = next((c for c in callbacks if isinstance(c, SimilarityCallback)), None)
    if sim is None or not sim.history:
        return []
    steps = next((c.steps for c in callbacks if isinstance(c, EpochSteps)), {})
    ppl = [(steps[h["epoch"]], h["val/ppl"]) for h in history
           if h.get("epoch") in steps and isinstance(h.get("val/ppl"), (int, float))]
    path = similarity_figure(sim.history, out_dir / "similarity_curve.png",
                             title=f"KNN match similarity ({label})", perplexity=ppl or None)
    return [("plots", str(path))]
