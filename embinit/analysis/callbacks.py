"""The analyses a trial logs during training: trainer callbacks, one registry entry per analysis.

A callback follows the trainer's callback protocol (`on_train_start(ctx)`, `on_step_end(ctx, step, loss)`,
`on_epoch_end(ctx, epoch, metrics)`, `on_train_end(ctx, result)`, any subset; `ctx.model.embeddings()`
maps a side to its `nn.Embedding`). `ANALYSES` maps the spec's name of an analysis (a field of
`embinit.spec.models.Analyses`) to a plain function `make(settings, trial) -> callback`:

- `settings` is that analysis's own validated spec model (`SimilarityAnalysis`, `ProbeAnalysis`), or a
  Mapping of the callback's own arguments for scripts without a spec;
- `trial` is an `AnalysisTrial` (embinit.analysis.trial_context): `log_fn(metrics, step)`, the trial's
  `out_dir` and its `cfg`.

The contract, tested once for every entry (tests/test_analysis_contract.py): the callback has a `prefix`
and logs only metrics under it (`<prefix>/...`, plus the `init/<prefix>/...` and `best/<prefix>/...`
summaries), always at an optimizer step of the trial; it only observes training. A table holding NaN/inf
(a diverging trial's, `trial_context.finite`) is skipped, never an error: the trainer records the trial as
diverged, and an error would fail it instead (in a fused group, its group-mates too).

- `similarity` -> `SimilarityCallback` (embinit.analysis.similarity_callback; its K-NN snapshot files
  and `similarity_curve` in embinit.analysis.snapshots), `sim/*`;
- `probe` -> `ProbeCallback` (embinit.analysis.probe_callback), `probe/*`.

`make_callbacks(settings, log_fn, out_dir, cfg)` builds one trial's callbacks, in registry order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from embinit.analysis.probe_callback import ProbeCallback, make_probe
from embinit.analysis.similarity_callback import SimilarityCallback, make_similarity
from embinit.analysis.snapshots import load_snapshot, similarity_curve, snapshot_path
from embinit.analysis.trial_context import AnalysisTrial, LogFn, model_table
from embinit.errors import EmbinitError

__all__ = ["ANALYSES", "AnalysisTrial", "LogFn", "ProbeCallback", "SimilarityCallback", "load_snapshot",
           "make_callbacks", "make_probe", "make_similarity", "model_table", "similarity_curve",
           "snapshot_path"]

# The spec's `analyses` (embinit.spec.models.Analyses has one field per entry) -> its callback's maker.
ANALYSES: dict[str, Callable[[Any, AnalysisTrial], Any]] = {
    "similarity": make_similarity,
    "probe": make_probe,
}


def make_callbacks(settings: Any = None, log_fn: LogFn | None = None, out_dir: str | Path | None = None,
                   cfg: Any = None) -> list:
    """One trial's callbacks, in registry order, for the analyses `settings` names: the spec's validated
    `Analyses`, or a Mapping from a name to its settings, e.g. {"similarity": {"reference_snapshots": DIR,
    "every_n_steps": 500, "k": 10, "metric": "jaccard", "snapshot": true}, "probe": {"every_n_epochs": 1}}
    (the callbacks' arguments; with `"snapshot": true` the snapshots go to `<out_dir>/knn_snapshots`).
    An analysis set to None is off; an unknown name fails with the registered ones."""
    chosen = dict(settings or {})   # a pydantic model iterates as (field, value) pairs
    unknown = sorted(set(chosen) - set(ANALYSES))
    if unknown:
        raise EmbinitError(f"unknown analyses {unknown}; choose from {sorted(ANALYSES)}")
    trial = AnalysisTrial(log_fn=log_fn, out_dir=Path(out_dir) if out_dir is not None else None, cfg=cfg)
    return [make(chosen[name], trial) for name, make in ANALYSES.items() if chosen.get(name) is not None]
