"""Classification: the encoder-only classifier; every evaluation split (SST-2 dev; MNLI dev matched
and mismatched) is tracked on its own, each with its best accuracy and epoch, and its lowest loss and
epoch (`best/val/loss`: what the reproduction compares beside the accuracy, as it does a translation's
criterion). The best checkpoint follows the first split's accuracy (MNLI: matched).

Metric names: one evaluation split gives `val/acc` and `val/loss`; several give a suffix from the
split name without its `dev_` prefix (`val/acc_matched`, `val/acc_mismatched`, ...).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from embinit.checkpoint_files import output_file
from embinit.models.stacked import IGNORE
from embinit.train.batching import bucket_batches, pad, stack_padded
from embinit.train.decoding import EOS_ID, PAD_ID


class ClassificationTask:
    kind = "classification"

    def __init__(self, data, cfg, device, autocast, max_positions: int):
        self.data, self.cfg, self.device, self.autocast = data, cfg, device, autocast
        self.max_positions = max_positions
        self.train_split = "train"
        self.eval_splits = list(getattr(data, "eval_splits", None) or ["dev"])
        self.suffix = {s: ("" if len(self.eval_splits) == 1 else "_" + _short(s)) for s in self.eval_splits}
        self.tracked = [(f"val/acc{self.suffix[s]}", "max") for s in self.eval_splits] + \
            [(f"val/loss{self.suffix[s]}", "min") for s in self.eval_splits]
        self._eval_batches: dict[str, list] = {}
        self._eval_order: dict[str, list[int]] = {}    # per split: the example index of each batch row
        self._predicted: dict[str, tuple[list[int], list[int]]] = {}   # per split: (predictions, labels)

    @classmethod
    def from_setup(cls, setup, autocast) -> "ClassificationTask":
        return cls(setup.data, setup.cfg, setup.device, autocast, setup.model_cfg.max_positions)

    def _join(self, ex) -> tuple[list[int], int]:
        """(ids, label); a sentence pair is joined as `a <eos> b` (the model module explains why)."""
        ids = list(ex[0]) if len(ex) == 2 else list(ex[0]) + [EOS_ID] + list(ex[1])
        return (ids[:self.max_positions] or [EOS_ID]), int(ex[-1])

    def _batches(self, split: str, generator=None) -> list[dict]:
        examples = [self._join(ex) for ex in self.data.splits[split]]
        lengths = [len(ids) for ids, _ in examples]
        idx_batches = bucket_batches(lengths, batch_size=None if self.cfg.max_tokens else self.cfg.batch_size,
                                     max_tokens=self.cfg.max_tokens, generator=generator)
        if generator is None:   # an evaluation split: where each row came from, for its predictions
            self._eval_order[split] = [i for idx in idx_batches for i in idx]
        return [_batch(pad([examples[i][0] for i in idx]), torch.tensor([examples[i][1] for i in idx]))
                for idx in idx_batches]

    def train_batches(self, generator: torch.Generator) -> list[dict]:
        return self._batches(self.train_split, generator)

    def batch_loss(self, model, batch):
        ids = batch["ids"].to(self.device, non_blocking=True)
        labels = batch["labels"].to(self.device, non_blocking=True)
        logits = model(ids)
        return F.cross_entropy(logits.float(), labels), batch["n_targets"], batch["n_tokens"]

    def fused_loss(self, fused, batches: list[dict]):
        """One step of a fused group (embinit.models.fused_encoder): ([G] losses, (separate, fused)
        token slots)."""
        ids = stack_padded([b["ids"] for b in batches], PAD_ID)
        labels = stack_padded([b["labels"] for b in batches], IGNORE)
        losses = fused.losses(ids.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True),
                              [tuple(b["ids"].shape) for b in batches])
        return losses, (sum(b["ids"].numel() for b in batches), ids.numel())

    @torch.no_grad()
    def _accuracy(self, model, split: str, keep: bool = False) -> tuple[float, float]:
        """(mean loss, accuracy) of `split`; `keep`: also keep each example's prediction (`test_outputs`)."""
        if split not in self._eval_batches:
            self._eval_batches[split] = self._batches(split)
        model.eval()
        sums, n = torch.zeros(2, dtype=torch.float64, device=self.device), 0   # (loss, correct), read once
        predicted = []
        for batch in self._eval_batches[split]:
            labels = batch["labels"].to(self.device)
            with self.autocast():
                logits = model(batch["ids"].to(self.device)).float()
            sums[0] += F.cross_entropy(logits, labels, reduction="sum")
            sums[1] += (logits.argmax(-1) == labels).sum()
            n += labels.numel()
            if keep:
                predicted.append(logits.argmax(-1))
        loss_sum, correct = sums.tolist()
        if keep:
            self._keep(split, torch.cat(predicted).tolist() if predicted else [])
        return loss_sum / max(n, 1), correct / max(n, 1)

    def _keep(self, split: str, rows: list[int]) -> None:
        """The predictions of `split`'s batch rows put back in the split's example order, with the labels."""
        order, labels = self._eval_order[split], [int(ex[-1]) for ex in self.data.splits[split]]
        predictions = [0] * len(labels)
        for i, p in zip(order, rows):
            predictions[i] = p
        self._predicted[split] = (predictions, labels)

    def validate(self, model) -> dict:
        out = {}
        for s in self.eval_splits:
            loss, acc = self._accuracy(model, s)
            out[f"val/loss{self.suffix[s]}"] = loss
            out[f"val/acc{self.suffix[s]}"] = acc
        return out

    def test(self, model) -> dict:
        """No metrics (GLUE test labels are hidden: the paper reports dev accuracy); the best checkpoint's
        predictions on every evaluation split are kept for `test_outputs`."""
        for s in self.eval_splits:
            self._accuracy(model, s, keep=True)
        return {}

    def test_outputs(self) -> dict[str, str]:
        """Per evaluation split kept by `test`: the predicted and the true label ids, one example a line."""
        out = {}
        for split, (predictions, labels) in self._predicted.items():
            out[output_file(split, "predictions")] = "".join(f"{p}\n" for p in predictions)
            out[output_file(split, "labels")] = "".join(f"{y}\n" for y in labels)
        return out


def _short(split: str) -> str:
    for prefix in ("dev_", "val_", "validation_"):
        if split.startswith(prefix):
            return split[len(prefix):]
    return split


def _batch(ids: torch.Tensor, labels: torch.Tensor) -> dict:
    return {"ids": ids, "labels": labels, "n_targets": int(labels.numel()),
            "n_tokens": int((ids != PAD_ID).sum())}
