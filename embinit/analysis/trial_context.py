"""What an analysis callback reads of the trial it observes: `AnalysisTrial` (what a registry entry of
`embinit.analysis.callbacks.ANALYSES` is given besides its settings), the model's embedding table and the
vocabulary behind it (from the trainer's `ctx`: `ctx.model.embeddings()` maps a side to its
`nn.Embedding`, `ctx.data.vocab` / `ctx.data.src_vocab` are the sides' vocabularies)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from embinit.errors import EmbinitError

LogFn = Callable[[dict, int], None]


@dataclass(frozen=True)
class AnalysisTrial:
    """The trial an analysis callback is made for. `log_fn(metrics, step)` is how it reports (the sweep
    passes the trial run's MLflow logger; None: the values stay in the callback's `history`); `out_dir`
    is the trial's folder; `cfg` its TrialConfig (None outside a sweep: settings that need the trial key,
    as a similarity `snapshot_dir`, then fail)."""

    log_fn: LogFn | None = None
    out_dir: Path | None = None
    cfg: Any = None


def model_table(model, key: str | None = None) -> tuple[str, torch.Tensor]:
    """(side, a float32 copy of the embedding table) of a model with `embeddings()`, on the model's
    device: trials sharing a GPU search neighbours and probe there too."""
    tables = model.embeddings()
    key = key or next((k for k in ("tok", "tgt", "src") if k in tables), next(iter(tables)))
    if key not in tables:
        raise EmbinitError(f"{key!r} is not an embedding table of the model; choose from {sorted(tables)}")
    return key, tables[key].weight.detach().float().clone()


def finite(table: torch.Tensor) -> bool:
    """Whether every value of `table` is finite. A diverging trial's table may not be: the trainer reads
    the loss after the steps that updated the weights (every `sync_interval` steps on an accelerator, in a
    fused group's window, and on any device one step late when a finite loss gave NaN/inf gradients).
    An analysis skips such a table rather than fail the trial with an error about its own input: the
    trainer records the trial as diverged (its result's `status`), and nothing meaningless is logged."""
    return bool(torch.isfinite(table).all())


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
