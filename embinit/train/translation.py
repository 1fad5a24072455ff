"""Translation: the encoder-decoder trained with teacher forcing; per-epoch validation loss (and BLEU,
decoded as the test set is: greedy unless the trial sets `beam_size`); the best checkpoint is the one
with the lowest validation loss, and its test BLEU is reported.

Sequences as fed: source `x ... <eos>`, target input `<bos> y ...`, target output `y ... <eos>`.
The output projection runs only on non-pad target positions (no FLOPs spent on padding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from embinit.bleu_rules import bleu_tokenizer, target_language
from embinit.checkpoint_files import TEST_HYPOTHESES, TEST_REFERENCES, lines_text
from embinit.models.stacked import IGNORE
from embinit.train.batching import bucket_batches, flat_targets, pad, stack_padded
from embinit.train.bleu import ReferenceBleu, detokenize_all, is_lowercased, unk_signature
from embinit.train.decoding import BOS_ID, EOS_ID, PAD_ID, translate
from embinit.train.loop import mean_loss, ppl
from embinit.train.oov_subset import oov_target_ids


class TranslationTask:
    kind = "translation"

    def __init__(self, data, cfg, device, autocast):
        self.data, self.cfg, self.device, self.autocast = data, cfg, device, autocast
        evals = [e for e in (getattr(data, "eval_splits", None) or ["val", "test"]) if e in data.splits]
        self.train_split, self.val_split = "train", evals[0]
        self.test_split = evals[1] if len(evals) > 1 else None
        # BLEU on the validation set each epoch, decoded with cfg.beam_size as the test set is
        # (cfg.extras["val_bleu"]=False skips it)
        self.val_bleu = bool((cfg.extras or {}).get("val_bleu", True))
        # `<unk>` stays in BLEU hypotheses unless the trial asks to drop it (embinit.train.bleu)
        self.drop_unk = bool((cfg.extras or {}).get("bleu_drop_unk", False))
        self.tracked = [("val/loss", "min")]       # the criterion: lowest validation loss
        self.lowercase = is_lowercased(getattr(data, "info", {}), data.vocab.tokens)
        self.round_trip = (getattr(data, "info", None) or {}).get("references") == "round_trip"
        self.bleu_tokenize = bleu_tokenizer(target_language(cfg.task))   # sacrebleu's for the language
        self._eval_batches: dict[str, list] = {}
        self._scorers: dict[str, tuple[list, ReferenceBleu]] = {}   # per split: its references, read once
        self._scored: dict[str, tuple[list[str], list[str]]] = {}     # per split: the last (hyps, refs) scored

    @classmethod
    def from_setup(cls, setup, autocast) -> "TranslationTask":
        task = cls(setup.data, setup.cfg, setup.device, autocast)
        task.oov_ids = oov_target_ids(setup.tables)   # the oov/* metrics (embinit.train.oov_subset)
        return task

    # batches ---------------------------------------------------------------------------------------
    def _batches(self, split: str, generator=None) -> list[dict]:
        pairs = self.data.splits[split]
        lengths = [(len(s) + 1, len(t) + 1) for s, t in pairs]
        idx_batches = bucket_batches(lengths, batch_size=None if self.cfg.max_tokens else self.cfg.batch_size,
                                     max_tokens=self.cfg.max_tokens, generator=generator)
        return [self._collate([pairs[i] for i in idx]) for idx in idx_batches]

    @staticmethod
    def _collate(pairs) -> dict:
        """Padded tensors, plus what the loss needs from the padding computed here on the host: the flat
        positions of the real target tokens, their ids, and the counts. The step then never asks the
        device for a size (boolean-mask indexing or `.sum()` there would wait for the GPU)."""
        src = pad([list(s) + [EOS_ID] for s, _ in pairs])
        tgt = pad([[BOS_ID] + list(t) + [EOS_ID] for _, t in pairs])
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        keep = (tgt_out != PAD_ID).flatten().nonzero().squeeze(1)
        return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "keep": keep,
                "targets": tgt_out.flatten()[keep], "n_targets": int(keep.numel()),
                "n_tokens": int((src != PAD_ID).sum()) + int((tgt_in != PAD_ID).sum())}

    def train_batches(self, generator: torch.Generator) -> list[dict]:
        return self._batches(self.train_split, generator)

    def eval_batches(self, split: str) -> list[dict]:
        if split not in self._eval_batches:
            self._eval_batches[split] = self._batches(split)
        return self._eval_batches[split]

    # loss ------------------------------------------------------------------------------------------
    def batch_loss(self, model, batch):
        """(mean loss over target tokens, number of target tokens, tokens fed)."""
        src, tgt_in, keep, targets = (batch[k].to(self.device, non_blocking=True)
                                      for k in ("src", "tgt_in", "keep", "targets"))
        memory, mask = model.encode(src)
        hidden = model.decode(tgt_in, memory, mask)
        logits = model.output(hidden.flatten(0, 1).index_select(0, keep))   # real target positions only
        return F.cross_entropy(logits.float(), targets), batch["n_targets"], batch["n_tokens"]

    def fused_loss(self, fused, batches: list[dict]):
        """One step of a fused group (embinit.models.fused): ([G] losses, (separate, fused) token slots)."""
        src = stack_padded([b["src"] for b in batches], PAD_ID)
        tgt_in = stack_padded([b["tgt_in"] for b in batches], PAD_ID)
        rows, targets = flat_targets(batches, "tgt_out", tgt_in.shape[2], IGNORE)
        losses = fused.losses(*(t.to(self.device, non_blocking=True) for t in (src, tgt_in, rows, targets)),
                              [tuple(b["src"].shape) for b in batches], [tuple(b["tgt_in"].shape) for b in batches])
        separate = sum(b["src"].numel() + b["tgt_in"].numel() for b in batches)
        return losses, (separate, src.numel() + tgt_in.numel())

    # evaluation ------------------------------------------------------------------------------------
    def _evaluate(self, model, split: str, prefix: str, bleu: bool) -> dict:
        loss = mean_loss(model, self.eval_batches(split), self, self.autocast)
        out = {f"{prefix}/loss": loss, f"{prefix}/ppl": ppl(loss)}
        if bleu:
            score, sig = self.bleu(model, split)
            out[f"{prefix}/bleu"] = score
            out[f"{prefix}/bleu_signature"] = sig
        return out

    def bleu(self, model, split: str) -> tuple[float, str]:
        sources = [s for s, _ in self.data.splits[split]]
        hyp_ids = translate(model, sources, beam_size=self.cfg.beam_size, alpha=self.cfg.length_penalty,
                            device=self.device, autocast=self.autocast())
        hyps = detokenize_all([self.data.vocab.decode(h) for h in hyp_ids], self.data.detokenize,
                              drop_unk=self.drop_unk)
        refs = self.data.references[split]
        kept = self._scorers.get(split)
        if kept is None or kept[0] is not refs:   # read once per list of references (a subset view has its own)
            kept = self._scorers[split] = (refs, ReferenceBleu(refs, self.lowercase, self.bleu_tokenize))
        score, sig = kept[1](hyps)
        self._scored[split] = (hyps, refs)
        return score, unk_signature(sig, self.drop_unk) + ("|ref:tokenizer" if self.round_trip else "")

    def validate(self, model) -> dict:
        out = self._evaluate(model, self.val_split, "val", self.val_bleu)
        out.pop("val/bleu_signature", None)
        return out

    def test(self, model) -> dict:
        if self.test_split is None:
            return {}
        return self._evaluate(model, self.test_split, "test", True)

    def test_outputs(self) -> dict[str, str]:
        """The hypotheses and references the last `test` scored, one sentence a line ({} before it)."""
        if self.test_split not in self._scored:
            return {}
        hyps, refs = self._scored[self.test_split]
        return {TEST_HYPOTHESES: lines_text(hyps), TEST_REFERENCES: lines_text(refs)}
