"""Language modelling: the decoder-only model on fixed-length chunks of the token stream; the best
checkpoint has the lowest validation perplexity, and its test perplexity is reported.

Splits: "train", then the task's evaluation splits in order (validation, test). Which source files
they come from is the task loader's business (e.g. `cfg.extras = {"train_split": "valid",
"eval_split": "test"}` for a WikiText-2 copy without its train file: there is then no test split).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from embinit.models.stacked import IGNORE
from embinit.train.batching import flat_targets, lm_chunks, stack_padded
from embinit.train.decoding import PAD_ID
from embinit.train.loop import mean_loss, ppl


class LMTask:
    kind = "lm"

    def __init__(self, data, cfg, device, autocast):
        self.data, self.cfg, self.device, self.autocast = data, cfg, device, autocast
        evals = [e for e in (getattr(data, "eval_splits", None) or ["valid", "test"]) if e in data.splits]
        self.train_split, self.val_split = "train", evals[0]
        self.test_split = evals[1] if len(evals) > 1 else None
        self.seq_len = cfg.max_len
        self.tracked = [("val/ppl", "min")]
        self._chunks: dict[str, torch.Tensor] = {}

    @classmethod
    def from_setup(cls, setup, autocast) -> "LMTask":
        return cls(setup.data, setup.cfg, setup.device, autocast)

    def _rows(self, split: str) -> torch.Tensor:
        if split not in self._chunks:
            self._chunks[split] = lm_chunks(self.data.splits[split], self.seq_len)
        return self._chunks[split]

    def _batches(self, split: str, generator=None) -> list[dict]:
        rows = self._rows(split)
        order = torch.randperm(len(rows), generator=generator) if generator is not None else torch.arange(len(rows))
        size = self.cfg.batch_size if not self.cfg.max_tokens else max(1, self.cfg.max_tokens // self.seq_len)
        return [_batch(rows[order[i:i + size]]) for i in range(0, len(rows), size)]

    def train_batches(self, generator: torch.Generator) -> list[dict]:
        return self._batches(self.train_split, generator)

    def batch_loss(self, model, batch):
        inputs, keep, targets = (batch[k].to(self.device, non_blocking=True)
                                 for k in ("inputs", "keep", "targets"))
        hidden = model.hidden(inputs, causal=True).flatten(0, 1)
        logits = model.output(hidden.index_select(0, keep))  # no output FLOPs on the tail
        return F.cross_entropy(logits.float(), targets), batch["n_targets"], batch["n_tokens"]

    def fused_loss(self, fused, batches: list[dict]):
        """One step of a fused group (embinit.models.fused_encoder): ([G] losses, (separate, fused)
        token slots)."""
        inputs = stack_padded([b["inputs"] for b in batches], PAD_ID)
        rows, targets = flat_targets(batches, "inputs", inputs.shape[2], IGNORE)
        losses = fused.losses(*(t.to(self.device, non_blocking=True) for t in (inputs, rows, targets)),
                              [tuple(b["inputs"].shape) for b in batches])
        return losses, (sum(b["inputs"].numel() for b in batches), inputs.numel())

    def _evaluate(self, model, split: str, prefix: str) -> dict:
        loss = mean_loss(model, self._batches(split), self, self.autocast)
        return {f"{prefix}/loss": loss, f"{prefix}/ppl": ppl(loss)}

    def validate(self, model) -> dict:
        return self._evaluate(model, self.val_split, "val")

    def test(self, model) -> dict:
        return self._evaluate(model, self.test_split, "test") if self.test_split else {}


def _batch(rows: torch.Tensor) -> dict:
    """Inputs, and (computed on the host, so the step never waits on the device for a size) the flat
    positions of the real targets (-1 marks the short row's tail), their ids and their count."""
    targets = rows[:, 1:].flatten()
    keep = (targets >= 0).nonzero().squeeze(1)
    return {"rows": rows, "inputs": rows[:, :-1].clamp(min=PAD_ID), "keep": keep, "targets": targets[keep],
            "n_targets": int(keep.numel()), "n_tokens": int(keep.numel())}
