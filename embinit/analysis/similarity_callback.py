"""`SimilarityCallback`: KNN match similarity of the model's table to a reference, every N steps, and
`make_similarity`, its entry in the analysis registry (`embinit.analysis.callbacks.ANALYSES`).

Two runs are not trained in lockstep; instead the reference is one of:
- `reference`: a fixed table -- a tensor, a checkpoint path (`best.pt`: that run's final embeddings),
  an embeddings file or an MLflow run id;
- `reference_snapshots`: another run's *snapshot folder* (embinit.analysis.snapshots): every run with
  `snapshot_dir` writes, at each measured step, its K-nearest-neighbour lists, and a run given that
  folder compares with the snapshot of the *same step*. This is how the blog's experiments run: seed 0
  writes snapshots, seed 1 reads them (start it after seed 0, or give `wait_s` for a concurrent one); a
  snapshot that is missing is skipped and listed in `missing_steps` (at once, without waiting, once the
  reference's series has ended: `snapshots.mark_end`, written at its train end, e.g. when it diverged).
  A snapshot measured with fewer neighbours or another neighbour measure than this run's settings (the
  spec's `analyses.similarity` changed after the reference trial wrote it: a finished reference is
  reused, not run again) cannot be compared either: its step goes to `missing_steps` too, with one
  warning naming the file; the similarity only observes training, so it never fails the trial.
Step 0 (before any update) is measured at train start, so a curve starts from the two inits, and the
last step at train end, on the table as the last epoch left it (by then a finished trial's model holds its
best epoch's weights, which the trainer loaded for the test: kept at the last epoch's end for this).
A table holding NaN/inf (a diverging trial's, `trial_context.finite`) is not measured: its step goes to
`skipped_steps`, nothing is logged or written for it, and the trainer records the trial as diverged.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from embinit.analysis.neighbours import DEFAULT_BLOCK, NEIGHBOUR_METRICS, knn
from embinit.analysis.similarity import SCORES, align, per_token_scores, summarize
from embinit.analysis.snapshots import (OtherSettings, clear_end, fingerprint, load_snapshot, mark_end,
                                       save_snapshot, series_ended, snapshot_path)
from embinit.analysis.trial_context import AnalysisTrial, LogFn, context_seen, context_tokens, finite, model_table
from embinit.errors import EmbinitError, unknown_name

log = logging.getLogger(__name__)

# How often a seed waiting for its reference seed's snapshot looks for it: the check is one stat, and a
# seed that got ahead of its reference resumes within this of the file appearing (it slept 5 s before).
POLL_S = 0.2

if TYPE_CHECKING:
    from embinit.spec.models import SimilarityAnalysis


class SimilarityCallback:
    def __init__(self, reference=None, every_n_steps: int = 500, k: int = 10, metric: str | list[str] = "jaccard",
                 neighbours: str = "dot", log_fn: LogFn | None = None, key: str | None = None,
                 snapshot_dir: str | Path | None = None, reference_snapshots: str | Path | None = None,
                 wait_s: float = 0.0, prefix: str = "sim", block_size: int = DEFAULT_BLOCK):
        if reference is not None and reference_snapshots is not None:
            raise EmbinitError("give either a fixed reference or reference_snapshots, not both")
        if reference is None and reference_snapshots is None and snapshot_dir is None:
            raise EmbinitError("SimilarityCallback needs a reference, reference_snapshots or a snapshot_dir")
        if every_n_steps < 1:
            raise EmbinitError(f"every_n_steps must be >= 1, got {every_n_steps}")
        metrics = (metric,) if isinstance(metric, str) else tuple(metric)
        bad = [m for m in metrics if m not in SCORES]
        if bad or not metrics:
            raise unknown_name("similarity metric", bad[0] if bad else "", SCORES)
        if neighbours not in NEIGHBOUR_METRICS:
            raise unknown_name("neighbour metric", neighbours, NEIGHBOUR_METRICS)
        # every score in `metric` is logged (the first one is the figure's); all share one intersection count
        self.reference, self.every, self.k, self.metrics = reference, every_n_steps, k, metrics
        self.metric = metrics[0]
        self.neighbours, self.log_fn, self.key, self.prefix = neighbours, log_fn, key, prefix
        self.snapshot_dir = Path(snapshot_dir) if snapshot_dir else None
        self.reference_snapshots = Path(reference_snapshots) if reference_snapshots else None
        self.wait_s, self.block = wait_s, block_size
        self.history: list[dict] = []
        self.missing_steps: list[int] = []
        self.skipped_steps: list[int] = []   # steps whose table held NaN/inf (a diverging trial)
        self._ref_cache = None     # (tokens, matrix) of a fixed reference
        self._ref_knn = None       # its neighbour lists, once aligned
        self._last_step = None
        self._ended = None          # (step, (side, table)) at the latest epoch end not measured
        self.other_settings: list[int] = []   # the missing steps whose reference snapshot had other settings
        self.other_settings_why: str | None = None   # the first such snapshot's mismatch, in words

    # ---- trainer events --------------------------------------------------------------------------
    def needs_weights(self, step: int) -> bool:
        """A fused trial's current weights are copied back for the steps measured (embinit.train.callbacks)."""
        return step % self.every == 0

    @property
    def step_order(self) -> int:
        """A reader of another trial's snapshots fires after the writers of its fused group."""
        return 1 if self.reference_snapshots is not None else 0

    def on_train_start(self, ctx) -> None:
        if self.snapshot_dir is not None:
            clear_end(self.snapshot_dir)
        self.measure(ctx, ctx.step)

    def on_step_end(self, ctx, step: int, loss: float) -> None:
        if step % self.every == 0:
            self.measure(ctx, step)

    def on_epoch_end(self, ctx, epoch: int, metrics: dict) -> None:
        if self._last_step != ctx.step:   # this may be the last step: keep its table for on_train_end
            self._ended = (ctx.step, model_table(ctx.model, self.key))

    def on_train_end(self, ctx, result) -> None:
        if self._last_step != ctx.step:   # the table of the last step, not the best weights loaded since
            ended = self._ended[1] if self._ended is not None and self._ended[0] == ctx.step else None
            self.measure(ctx, ctx.step, ended)
        self._ended = None
        if self.snapshot_dir is not None:   # the readers of this series wait for no later step
            mark_end(self.snapshot_dir, ctx.step, getattr(result, "status", None))

    # ---- work ------------------------------------------------------------------------------------
    def measure(self, ctx, step: int, table: tuple[str, torch.Tensor] | None = None) -> dict | None:
        """Measure the model's table (or `table`, a `model_table` taken earlier) as of `step`."""
        self._last_step = step
        key, table = table if table is not None else model_table(ctx.model, self.key)
        if not finite(table):   # no neighbours to compare; the trainer records the divergence
            self.skipped_steps.append(step)
            return None
        tokens = context_tokens(ctx, key)
        idx = None
        if self.snapshot_dir is not None:
            _, idx = knn(table, self.k, self.neighbours, self.block)
            idx = idx.cpu()
            save_snapshot(self.snapshot_dir, step, idx, self.k, self.neighbours, tokens)
        if self.reference is None and self.reference_snapshots is None:
            return None
        if self.reference_snapshots is not None:
            ref_idx = self._snapshot_at(step, tokens)
            if ref_idx is None:
                return None
            if idx is None:
                _, idx = knn(table, self.k, self.neighbours, self.block)
        else:
            idx, ref_idx = self._fixed_pair(table, tokens, idx)
        metrics = {}
        for name in self.metrics:
            scores, inter = per_token_scores(idx, ref_idx, name)
            summary = summarize(scores, inter, self.k, torch.ones(len(scores), dtype=torch.bool))
            metrics[f"{self.prefix}/knn_{name}_mean"] = summary["mean"]
            metrics[f"{self.prefix}/knn_{name}_median"] = summary["median"]
            metrics.update(self._seen_metrics(ctx, key, scores, inter, name))
        self.history.append({"step": step, **metrics})
        if self.log_fn is not None:
            self.log_fn(metrics, step)
        return metrics

    def _seen_metrics(self, ctx, key: str, scores: torch.Tensor, inter: torch.Tensor,
                      name: str) -> dict[str, float]:
        """`<prefix>/seen/knn_<metric>_mean|median` and `<prefix>/seen/tokens`: the same per-token scores
        aggregated over the tokens training saw only (neighbours are still searched among all rows)."""
        seen = context_seen(ctx, key)
        if seen is None or len(seen) != len(scores) or not seen.any():
            return {}
        part = summarize(scores, inter, self.k, seen)
        return {f"{self.prefix}/seen/knn_{name}_mean": part["mean"],
                f"{self.prefix}/seen/knn_{name}_median": part["median"],
                f"{self.prefix}/seen/tokens": float(part["tokens"])}

    def _snapshot_at(self, step: int, tokens) -> torch.Tensor | None:
        path = snapshot_path(self.reference_snapshots, step)
        deadline = time.monotonic() + self.wait_s
        while (not path.exists() and not series_ended(self.reference_snapshots)   # written atomically
               and time.monotonic() < deadline):
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        if not path.exists():
            self.missing_steps.append(step)
            return None
        try:
            return load_snapshot(path, self.k, self.neighbours, fingerprint(tokens))
        except OtherSettings as e:   # the reference measured otherwise: nothing to compare at this step
            if self.other_settings_why is None:
                self.other_settings_why = str(e)
                log.warning("KNN similarity: step %d (and any later such step) not compared: %s; the "
                            "reference trial wrote it under other analyses.similarity settings", step, e)
            self.other_settings.append(step)
            self.missing_steps.append(step)
            return None

    def _fixed_pair(self, table, tokens, idx):
        if self._ref_cache is None:
            self._ref_cache = _load_reference(self.reference)
        ref_tokens, ref = self._ref_cache
        ref = ref.to(table.device)
        if ref_tokens is not None and tokens is not None and ref_tokens != tokens:
            _, table, ref = align(tokens, table, ref_tokens, ref)
            idx = None                      # neighbours must be searched within the shared tokens
        elif ref.shape[0] != table.shape[0]:
            raise EmbinitError(f"reference has {ref.shape[0]} rows, the model's table {table.shape[0]}, "
                               "and no token names to align them")
        if self._ref_knn is None:
            self._ref_knn = knn(ref, self.k, self.neighbours, self.block)[1]
        if idx is None:
            idx = knn(table, self.k, self.neighbours, self.block)[1]
        return idx, self._ref_knn


def _load_reference(reference) -> tuple[list[str] | None, torch.Tensor]:
    if isinstance(reference, torch.Tensor):
        return None, reference.detach().float().cpu()
    from embinit.analysis.sources import load_embeddings
    emb = load_embeddings(reference)
    return emb.tokens, emb.matrix


# ---- the registry entry ---------------------------------------------------------------------------
# The spec's fields that name other trials' folders: resolved per trial by `_snapshot_folders`; every
# other field of SimilarityAnalysis is a SimilarityCallback argument of the same name.
_PER_TRIAL = {"reference_seed", "reference_emb_seed", "snapshot_dir"}


def make_similarity(settings: SimilarityAnalysis | Mapping[str, Any], trial: AnalysisTrial) -> SimilarityCallback:
    """The spec's `analyses.similarity` (a validated SimilarityAnalysis) for one trial: its snapshots go
    to `<snapshot_dir>/<trial key>/`, and with `reference_seed` / `reference_emb_seed` it compares with
    its twin's folder there. A Mapping instead holds SimilarityCallback's own arguments (scripts without
    a spec), where `"snapshot": true` writes the snapshots to `<out_dir>/knn_snapshots`."""
    if isinstance(settings, Mapping):
        return _from_arguments(settings, trial)
    return SimilarityCallback(log_fn=trial.log_fn, **settings.model_dump(exclude=_PER_TRIAL),
                              **_snapshot_folders(settings, trial.cfg))


def _from_arguments(arguments: Mapping[str, Any], trial: AnalysisTrial) -> SimilarityCallback:
    args = dict(arguments)
    if args.pop("snapshot", False):
        if trial.out_dir is None:
            raise EmbinitError("similarity snapshots need the trial's out_dir")
        args["snapshot_dir"] = Path(trial.out_dir) / "knn_snapshots"
    return SimilarityCallback(log_fn=trial.log_fn, **args)


def _snapshot_folders(settings: SimilarityAnalysis, cfg) -> dict[str, Path]:
    if settings.snapshot_dir is None:
        return {}
    if cfg is None:
        raise EmbinitError("a similarity snapshot_dir needs the trial's config: its key names the folder")
    root = Path(settings.snapshot_dir)
    twin = twin_of(settings, cfg)
    return {"snapshot_dir": root / cfg.key(), **({"reference_snapshots": root / twin} if twin else {})}


def twin_of(settings: SimilarityAnalysis, cfg) -> str | None:
    """The key of the trial whose snapshots `cfg`'s trial compares with; None for the reference itself."""
    from embinit.train.prepare import emb_seed
    ref_seed, ref_emb = settings.reference_seed, settings.reference_emb_seed
    if ref_seed is not None and cfg.seed != ref_seed:
        return twin_key(cfg, ref_seed)
    if ref_emb is not None and emb_seed(cfg) != ref_emb:
        return dataclasses.replace(cfg, emb_seed=ref_emb).key()
    return None


def twin_key(cfg, seed: int) -> str:
    """The trial key of the same config at another seed (whose snapshots a trial compares with)."""
    return dataclasses.replace(cfg, seed=seed).key()
