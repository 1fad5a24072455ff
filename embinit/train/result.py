"""`TrialResult`: everything one trial produced, as plain JSON-serializable data."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrialResult:
    config: dict[str, Any]                 # the trial's config as run (d_model and heads resolved)
    key: str                               # TrialConfig.key() of the config the caller passed
    status: str = "finished"               # finished | diverged
    diverged_step: int | None = None       # global optimizer step whose loss was NaN/inf
    history: list[dict[str, Any]] = field(default_factory=list)   # one dict per epoch
    best_epoch: int | None = None          # epoch of the task criterion's best validation value
    best: dict[str, Any] = field(default_factory=dict)            # best validation metrics (+ epochs)
    test: dict[str, Any] = field(default_factory=dict)            # test metrics of the best checkpoint
    emb_stats_init: dict[str, Any] = field(default_factory=dict)
    emb_stats_best: dict[str, Any] = field(default_factory=dict)
    label: str = ""                        # paper name of the (target / only) init, e.g. GloVe_Xavier
    src_label: str | None = None           # translation: the source-side init's name
    coverage: dict[str, Any] | None = None  # pretrained coverage of the vocabulary (init library)
    bleu_signature: str | None = None      # sacrebleu signature of test/bleu
    wall_time_s: float = 0.0
    checkpoint_path: str | None = None     # best.pt, when an out_dir was given
    info: dict[str, Any] = field(default_factory=dict)  # model size, data sizes, device, threads

    def to_dict(self) -> dict[str, Any]:
        return _clean(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrialResult":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    def metric(self) -> float | None:
        """The number Table 1 reports for this trial's task (test BLEU, dev accuracy, test ppl)."""
        for k in ("test/bleu", "test/ppl"):
            if k in self.test:
                return self.test[k]
        for k in ("val/acc_matched", "val/acc"):
            if k in self.best:
                return self.best[k]
        return None


def _clean(x):
    """Tensors and numpy scalars to Python numbers; NaN/inf to None (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", 0) == 0:
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
