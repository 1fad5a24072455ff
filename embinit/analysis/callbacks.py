"""Trainer callbacks that log the analyses during training (the trainer's callback protocol:
`on_train_start(ctx)`, `on_step_end(ctx, step, loss)`, `on_epoch_end(ctx, epoch, metrics)`,
`on_train_end(ctx, result)`; `ctx.model.embeddings()` maps a side to its `nn.Embedding`).

`SimilarityCallback` -- KNN match similarity of the model's table to a reference, every N steps.
Two runs are not trained in lockstep; instead the reference is one of:
- `reference`: a fixed table -- a tensor, a checkpoint path (`best.pt`: that run's final embeddings),
  an embeddings file or an MLflow run id;
- `reference_snapshots`: another run's *snapshot folder*: every run with `snapshot_dir` writes, at
  each measured step, its K-nearest-neighbour lists (`knn_step00000500.pt`, N x K int32: ~2 MB at 50k
  tokens, instead of a 100 MB table), and a run given that folder compares with the snapshot of the
  *same step*. This is how the blog's experiments run: seed 0 writes snapshots, seed 1 reads them (start it
  after seed 0, or give `wait_s` for a concurrent one); a snapshot that is missing is skipped and
  listed in `missing_steps`. `similarity_curve(dir_a, dir_b)` recomputes the whole curve afterwards
  from two snapshot folders, whatever order the runs ran in.
Step 0 (before any update) is measured at train start, so a curve starts from the two inits.

`ProbeCallback` -- the position-absorption probe at train start, every N epochs, and at the end.
`log_fn(metrics: dict, step: int)` is how both report (the sweep passes an MLflow logger); without it
the values stay in `history`. `make_callbacks(settings, log_fn)` builds them from a plain dict.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Callable

import torch

from embinit.analysis.neighbours import DEFAULT_BLOCK, NEIGHBOUR_METRICS, knn
from embinit.analysis.similarity import SCORES, align, per_token_scores, summarize
from embinit.errors import EmbinitError, unknown_name
from embinit.trusted import check_writable

LogFn = Callable[[dict, int], None]


def model_table(model, key: str | None = None) -> tuple[str, torch.Tensor]:
    """(side, a float32 copy of the embedding table) of a model with `embeddings()`, on the model's
    device: trials sharing a GPU search neighbours and probe there too."""
    tables = model.embeddings()
    key = key or next((k for k in ("tok", "tgt", "src") if k in tables), next(iter(tables)))
    if key not in tables:
        raise EmbinitError(f"{key!r} is not an embedding table of the model; choose from {sorted(tables)}")
    return key, tables[key].weight.detach().float().clone()


def context_tokens(ctx, key: str) -> list[str] | None:
    data = getattr(ctx, "data", None)
    vocab = getattr(data, "src_vocab" if key == "src" else "vocab", None) if data is not None else None
    return list(vocab.tokens) if vocab is not None else None


def context_seen(ctx, key: str) -> torch.Tensor | None:
    """bool [N]: the rows whose token training saw (its training count > 0); None when the vocabulary
    has no counts. A GPT-2 LM keeps a row for every tokenizer entry, seen or not; for the post's
    experiments those unseen rows never move (untied) and dilute the all-token mean."""
    data = getattr(ctx, "data", None)
    vocab = getattr(data, "src_vocab" if key == "src" else "vocab", None) if data is not None else None
    if vocab is None or not getattr(vocab, "counts", None):
        return None
    return torch.tensor([vocab.counts.get(t, 0) > 0 for t in vocab.tokens], dtype=torch.bool)


def fingerprint(tokens: list[str] | None) -> str | None:
    return hashlib.sha256("\n".join(tokens).encode()).hexdigest()[:16] if tokens else None


def snapshot_path(folder: str | Path, step: int) -> Path:
    return Path(folder) / f"knn_step{step:08d}.pt"


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
        self._ref_cache = None     # (tokens, matrix) of a fixed reference
        self._ref_knn = None       # its neighbour lists, once aligned
        self._last_step = None

    # ---- trainer events --------------------------------------------------------------------------
    def needs_weights(self, step: int) -> bool:
        """A fused trial's current weights are copied back for the steps measured (embinit.train.callbacks)."""
        return step % self.every == 0

    @property
    def step_order(self) -> int:
        """A reader of another trial's snapshots fires after the writers of its fused group."""
        return 1 if self.reference_snapshots is not None else 0

    def on_train_start(self, ctx) -> None:
        self.measure(ctx, ctx.step)

    def on_step_end(self, ctx, step: int, loss: float) -> None:
        if step % self.every == 0:
            self.measure(ctx, step)

    def on_train_end(self, ctx, result) -> None:
        if self._last_step != ctx.step:
            self.measure(ctx, ctx.step)

    # ---- work ------------------------------------------------------------------------------------
    def measure(self, ctx, step: int) -> dict | None:
        self._last_step = step
        key, table = model_table(ctx.model, self.key)
        tokens = context_tokens(ctx, key)
        idx = None
        if self.snapshot_dir is not None:
            _, idx = knn(table, self.k, self.neighbours, self.block)
            idx = idx.cpu()
            self._save_snapshot(step, idx, tokens)
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

    def _save_snapshot(self, step: int, idx: torch.Tensor, tokens) -> None:
        folder = check_writable(self.snapshot_dir, "the KNN snapshot folder")  # resolved as it is used
        folder.mkdir(parents=True, exist_ok=True)
        path = snapshot_path(folder, step)
        tmp = path.with_name(path.name + ".tmp")
        torch.save({"step": step, "k": self.k, "neighbours": self.neighbours, "indices": idx.int(),
                    "fingerprint": fingerprint(tokens)}, tmp)
        os.replace(tmp, path)   # a concurrent reader never sees a half-written file

    def _snapshot_at(self, step: int, tokens) -> torch.Tensor | None:
        path = snapshot_path(self.reference_snapshots, step)
        deadline = time.monotonic() + self.wait_s
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(min(5.0, self.wait_s))
        if not path.exists():
            self.missing_steps.append(step)
            return None
        return load_snapshot(path, self.k, self.neighbours, fingerprint(tokens))

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


def load_snapshot(path: Path, k: int, neighbours: str, fp: str | None = None) -> torch.Tensor:
    snap = torch.load(path, map_location="cpu", weights_only=True)
    if snap["neighbours"] != neighbours or snap["k"] < k:
        raise EmbinitError(f"{path} holds K={snap['k']} {snap['neighbours']} neighbours; "
                           f"K={k} {neighbours} was asked")
    if fp is not None and snap.get("fingerprint") not in (None, fp):
        raise EmbinitError(f"{path} was written for another vocabulary (fingerprint "
                           f"{snap['fingerprint']} vs {fp})")
    return snap["indices"][:, :k].long()   # the first k of K sorted neighbours are the top k


def similarity_curve(dir_a: str | Path, dir_b: str | Path, k: int = 10, metric: str = "jaccard",
                     neighbours: str = "dot") -> list[dict]:
    """[{step, mean, median}] for every step both snapshot folders have, in step order."""
    steps_a = {int(p.stem[8:]) for p in Path(dir_a).glob("knn_step*.pt")}
    steps_b = {int(p.stem[8:]) for p in Path(dir_b).glob("knn_step*.pt")}
    curve = []
    for step in sorted(steps_a & steps_b):
        ia = load_snapshot(snapshot_path(dir_a, step), k, neighbours)
        ib = load_snapshot(snapshot_path(dir_b, step), k, neighbours)
        scores, inter = per_token_scores(ia, ib, metric)
        s = summarize(scores, inter, k, torch.ones(len(scores), dtype=torch.bool))
        curve.append({"step": step, "mean": s["mean"], "median": s["median"]})
    return curve


class ProbeCallback:
    """`probe/*` metrics (embinit.analysis.probe) at step 0, every N epochs, and after training.

    With `summary=True` (the sweep's setting) the step-0 values are also logged as `init/probe/*`, and
    after a finished trial -- when the trainer has loaded the best epoch's weights -- the probe runs on
    them and logs `best/probe/*`, even if the last epoch was already measured (its weights may differ)."""

    def __init__(self, every_n_epochs: int | None = None, log_fn: LogFn | None = None,
                 key: str | None = None, max_len: int | None = None, summary: bool = False, **probe_kw):
        self.every, self.log_fn, self.key = every_n_epochs, log_fn, key
        self.max_len, self.kw, self.summary = max_len, probe_kw, summary
        self.history: list[dict] = []
        self._last_step = None

    def probe(self, ctx) -> dict:
        from embinit.analysis.probe import DEFAULT_MAX_LEN, probe_table
        _, table = model_table(ctx.model, self.key)
        cfg = getattr(ctx, "cfg", None)
        kw = {"pe_base": float(getattr(cfg, "pe_base", None) or 10000.0), **self.kw}
        return probe_table(table, max_len=self.max_len or DEFAULT_MAX_LEN, **kw)

    def measure(self, ctx, step: int, phase: str | None = None) -> dict:
        """Probe now, log `probe/*` at `step` (and `<phase>/probe/*` when a phase is given)."""
        self._last_step = step
        metrics = self.probe(ctx)
        self.history.append({"step": step, **metrics})
        self._log({**metrics, **({f"{phase}/{k}": v for k, v in metrics.items()} if phase else {})}, step)
        return metrics

    def _log(self, metrics: dict, step: int) -> None:
        if self.log_fn is not None:
            self.log_fn(metrics, step)

    def on_train_start(self, ctx) -> None:
        self.measure(ctx, ctx.step, "init" if self.summary and ctx.step == 0 else None)

    def on_epoch_end(self, ctx, epoch: int, metrics: dict) -> None:
        if self.every and epoch % self.every == 0:
            self.measure(ctx, ctx.step)

    def on_train_end(self, ctx, result) -> None:
        best = self.summary and getattr(result, "status", None) == "finished"
        if self._last_step != ctx.step:
            self.measure(ctx, ctx.step, "best" if best else None)
        elif best:   # the series has this step (last epoch's weights); the best weights are logged beside
            self._log({f"best/{k}": v for k, v in self.probe(ctx).items()}, ctx.step)


def make_callbacks(settings: dict | None, log_fn: LogFn | None = None, out_dir: str | Path | None = None):
    """Callbacks from a plain dict, e.g. {"similarity": {"reference_snapshots": DIR, "every_n_steps":
    500, "k": 10, "metric": "jaccard", "snapshot": true}, "probe": {"every_n_epochs": 1}} (keys are
    the callbacks' arguments). With `"snapshot": true` the snapshots go to `<out_dir>/knn_snapshots`."""
    settings = dict(settings or {})
    unknown = sorted(set(settings) - {"similarity", "probe"})
    if unknown:
        raise EmbinitError(f"unknown analyses {unknown}; choose from ['probe', 'similarity']")
    out = []
    if settings.get("similarity") is not None:
        sim = dict(settings["similarity"])
        if sim.pop("snapshot", False):
            if out_dir is None:
                raise EmbinitError("similarity snapshots need the trial's out_dir")
            sim["snapshot_dir"] = Path(out_dir) / "knn_snapshots"
        out.append(SimilarityCallback(log_fn=log_fn, **sim))
    if settings.get("probe") is not None:
        out.append(ProbeCallback(log_fn=log_fn, **dict(settings["probe"])))
    return out
