"""The spec's `analyses` in a sweep: trainer callbacks (the registry embinit.analysis.callbacks.ANALYSES)
that log the position probe and the KNN match similarity to the trial's MLflow run.

The settings travel in the sweep's `shared` dict beside the TrialConfig, never inside it: the analyses
only observe training, so they must not change the trial key (a finished trial is reused as it is,
without re-running to add an analysis).

Similarity against another seed (the blog's experiment 1): every trial writes its K-NN snapshots to
`<snapshot_dir>/<trial key>/`; a trial whose seed is not `reference_seed` compares, step by step, with
the folder of its twin -- the same config at `reference_seed`. With `reference_emb_seed` instead, the
twin is the same config (same trial seed) at that embedding seed: the two runs differ only in their
tables' init, as in the blog's code (embinit.analysis.similarity_callback.twin_of). The folder must be
visible to every worker (local Ray, or a shared filesystem on a cluster).

The trial's run records the similarity's settings (`run_tags`: K, the neighbour measure, the scores, how
often, which reference) as tags beside its `sim/*` metrics, so runs can be compared on them in MLflow's UI;
a finished run another sweep reused keeps those it was trained with.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from embinit.spec.models import Analyses
from embinit.tracking.records import NOT_COMPARED_TAG, SIMILARITY_TAG


def shared_settings(spec) -> dict[str, Any] | None:
    """The spec's analyses as a plain dict for the workers (`Analyses.model_dump()`; `trial_callbacks`
    validates it back), paths made absolute (workers run in other directories); None when the spec has
    none."""
    if spec.analyses is None:
        return None
    analyses, sim = spec.analyses, spec.analyses.similarity
    if sim is not None:
        paths: dict[str, str] = {}
        if sim.reference_seed is not None or sim.reference_emb_seed is not None or sim.snapshot_dir is not None:
            root = sim.snapshot_dir or Path(spec.cache_dir or ".embinit-cache") / "knn_snapshots"
            # absolute, symlinks kept: the trial resolves and checks them when it writes (embinit.trusted)
            paths["snapshot_dir"] = os.path.abspath(Path(root).expanduser())
        if sim.reference is not None and Path(sim.reference).expanduser().exists():   # else an MLflow run id
            paths["reference"] = os.path.abspath(Path(sim.reference).expanduser())
        analyses = analyses.model_copy(update={"similarity": sim.model_copy(update=paths)})
    return analyses.model_dump()


def run_tags(settings: dict[str, Any] | None, cfg) -> dict[str, str]:
    """The similarity settings (`settings` from `shared_settings`) as the trial run `cfg` records them
    (`records.SIMILARITY_TAG` + k, neighbours, scores, every_n_steps, reference; the reference seed's own
    run says it is the reference); {} without a similarity analysis."""
    sim = Analyses.model_validate(settings).similarity if settings else None
    if sim is None:
        return {}
    from embinit.analysis.similarity_callback import twin_of  # torch; workers only
    scores = [sim.metric] if isinstance(sim.metric, str) else sim.metric
    if sim.reference_seed is not None:
        reference = f"reference_seed {sim.reference_seed}"
    elif sim.reference_emb_seed is not None:
        reference = f"reference_emb_seed {sim.reference_emb_seed}"
    else:
        reference = "none (snapshots only)" if sim.reference is None else f"fixed {sim.reference}"
    if reference.startswith("reference") and twin_of(sim, cfg) is None:
        reference += " (this run is the reference)"
    values = {"k": sim.k, "neighbours": sim.neighbours, "scores": ",".join(scores),
              "every_n_steps": sim.every_n_steps, "reference": reference}
    return {SIMILARITY_TAG + name: str(v) for name, v in values.items()}


def not_compared_tags(callbacks: list) -> dict[str, str]:
    """`{records.NOT_COMPARED_TAG: ...}` naming the steps this attempt's similarity callback could not
    compare with its reference seed, and why: no snapshot of that step (the reference had not written it
    within `wait_s`, or its series had ended, e.g. it diverged), or one written under other settings (the
    spec's K or neighbour measure changed after the reference trial was trained; it is reused, not run
    again). {} when every step was compared, or without a similarity analysis. On the run, so a gap in
    its `sim/*` curve says why in MLflow, not only in the Ray worker's log."""
    from embinit.analysis.similarity_callback import SimilarityCallback
    sim = next((c for c in callbacks if isinstance(c, SimilarityCallback)), None)
    if sim is None or not sim.missing_steps:
        return {}
    other = set(sim.other_settings)
    absent = [st for st in sim.missing_steps if st not in other]
    parts = ([f"{_steps(absent)}: no reference snapshot"] if absent else []) + (
        [f"{_steps(sim.other_settings)}: the reference's snapshots were written under other settings "
         f"({sim.other_settings_why})"] if other else [])
    return {NOT_COMPARED_TAG: "; ".join(parts)}


def _steps(steps: list[int], shown: int = 6) -> str:
    """`steps 0, 100, 200 (3)`, the first `shown` and the last when there are more."""
    listed = steps if len(steps) <= shown else [*steps[:shown - 1], "...", steps[-1]]
    return f"step{'s' if len(steps) != 1 else ''} {', '.join(map(str, listed))} ({len(steps)})"


def trial_callbacks(settings: dict[str, Any] | None, cfg, log_fn: Callable[[dict, int], None],
                    out_dir: Path) -> list:
    """The callbacks of one trial (`cfg`: its TrialConfig), logging through `log_fn(metrics, step)`:
    `settings` (from `shared_settings`) validated back into the spec's `Analyses`, each analysis made by
    its registry entry (embinit.analysis.callbacks.ANALYSES)."""
    if not settings:
        return []
    from embinit.analysis.callbacks import make_callbacks  # torch; workers only
    analyses = Analyses.model_validate(settings)
    out = make_callbacks(analyses, log_fn=log_fn, out_dir=out_dir, cfg=cfg)
    return out + [EpochSteps()] if analyses.similarity is not None else out


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
    from embinit.analysis.plots import similarity_figure
    from embinit.analysis.similarity_callback import SimilarityCallback
    sim = next((c for c in callbacks if isinstance(c, SimilarityCallback)), None)
    if sim is None or not sim.history:
        return []
    steps = next((c.steps for c in callbacks if isinstance(c, EpochSteps)), {})
    ppl = [(steps[h["epoch"]], h["val/ppl"]) for h in history
           if h.get("epoch") in steps and isinstance(h.get("val/ppl"), (int, float))]
    path = similarity_figure(sim.history, out_dir / "similarity_curve.png",
                             title=f"KNN match similarity ({label})", perplexity=ppl or None)
    return [("plots", str(path))]
