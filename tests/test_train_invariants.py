"""What padding, masks and the loss's normalisation must not change: a sentence's logits and loss are the
same alone or padded in a batch, and a batch's loss is the token-weighted mean of its sentences' losses
(translation, language model) or the mean over examples (classification). Evaluation runs with dropout off."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from embinit.models import ModelConfig, build_model
from embinit.train.batching import lm_chunks, pad
from embinit.train.classification import ClassificationTask, _batch as class_batch
from embinit.train.lm import LMTask, _batch as lm_batch
from embinit.train.loop import mean_loss
from embinit.train.translation import TranslationTask

torch.set_num_threads(1)
D, V = 16, 30
TOL = 1e-6
HOST = SimpleNamespace(device=torch.device("cpu"))   # what batch_loss reads of its task
HOST_TASK_TRANSLATION = SimpleNamespace(batch_loss=lambda m, b: TranslationTask.batch_loss(HOST, m, b))
_no_autocast = nullcontext


def build(kind: str, pre_ln: bool = False, dropout: float = 0.0):
    g = torch.Generator().manual_seed(0)
    cfg = ModelConfig(d_model=D, heads=4, layers=2, ff_dim=32, max_positions=64, pre_ln=pre_ln, dropout=dropout)
    names = ("src", "tgt") if kind == "translation" else ("tok",)
    return build_model(kind, {n: torch.randn(V, D, generator=g) for n in names}, cfg, num_labels=3,
                       generator=torch.Generator().manual_seed(1))


def sentences(lengths, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, V, (n,), generator=g).tolist() for n in lengths]


PAIRS = list(zip(sentences([3, 11, 6, 1, 8]), sentences([5, 2, 12, 4, 7], seed=3)))


@pytest.mark.parametrize("pre_ln", [False, True])
def test_a_pair_gives_the_same_logits_alone_and_padded_in_a_batch(pre_ln):
    m = build("translation", pre_ln).eval()
    batch = TranslationTask._collate(PAIRS)
    with torch.no_grad():
        together = m(batch["src"], batch["tgt_in"])
        for i, pair in enumerate(PAIRS):
            one = TranslationTask._collate([pair])
            alone = m(one["src"], one["tgt_in"])
            n = alone.shape[1]
            torch.testing.assert_close(together[i, :n], alone[0], rtol=TOL, atol=TOL)   # fp32 rounding only


@pytest.mark.parametrize("pre_ln", [False, True])
def test_a_translation_batch_loss_is_the_token_weighted_mean_of_its_pairs_losses(pre_ln):
    m = build("translation", pre_ln).eval()
    with torch.no_grad():
        loss, n, _ = TranslationTask.batch_loss(HOST, m, TranslationTask._collate(PAIRS))
        parts = [TranslationTask.batch_loss(HOST, m, TranslationTask._collate([p])) for p in PAIRS]
    assert n == sum(len(t) + 1 for _, t in PAIRS)   # every target token and its eos, no padding
    weighted = sum(float(part) * k for part, k, _ in parts) / sum(k for _, k, _ in parts)
    assert abs(float(loss) - weighted) <= TOL
    # and the evaluation mean over batches is the same token-weighted mean
    batches = [TranslationTask._collate(PAIRS[:2]), TranslationTask._collate(PAIRS[2:])]
    assert abs(mean_loss(m, batches, HOST_TASK_TRANSLATION, _no_autocast) - weighted) <= TOL


def test_a_sentence_is_classified_the_same_alone_or_padded_in_a_batch():
    m = build("classification").eval()
    sents = sentences([4, 13, 1, 9])
    labels = torch.tensor([0, 2, 1, 2])
    task = SimpleNamespace(device=torch.device("cpu"))
    with torch.no_grad():
        together = m(pad(sents))
        loss, n, _ = ClassificationTask.batch_loss(task, m, class_batch(pad(sents), labels))
        alone = torch.cat([m(pad([s])) for s in sents])
        parts = [float(ClassificationTask.batch_loss(task, m, class_batch(pad([s]), labels[i:i + 1]))[0])
                 for i, s in enumerate(sents)]
    torch.testing.assert_close(together, alone, rtol=TOL, atol=TOL)
    assert n == 4 and abs(float(loss) - sum(parts) / 4) <= TOL


def test_the_language_models_short_last_row_loses_nothing_to_its_padding():
    """The last chunk's padded tail is neither a target nor seen by a real position (causal attention)."""
    m = build("lm").eval()
    stream = sentences([23])[0]
    rows = lm_chunks(stream, 8)   # 3 rows, the last one with 6 real positions of 9
    with torch.no_grad():
        loss, n, _ = LMTask.batch_loss(HOST, m, lm_batch(rows))
        parts = [LMTask.batch_loss(HOST, m, lm_batch(rows[i:i + 1])) for i in range(len(rows))]
        tail = torch.tensor([stream[16:]])     # the last row without its padding
        short = LMTask.batch_loss(HOST, m, lm_batch(tail))
    assert n == len(stream) - 1
    assert abs(float(loss) - sum(float(p) * k for p, k, _ in parts) / n) <= TOL
    assert abs(float(parts[-1][0]) - float(short[0])) <= TOL


def test_evaluation_turns_dropout_off_whatever_mode_the_model_was_in():
    m = build("translation", dropout=0.3)
    batches = [TranslationTask._collate(PAIRS)]
    m.train()
    first = mean_loss(m, batches, HOST_TASK_TRANSLATION, _no_autocast)
    m.train()
    assert mean_loss(m, batches, HOST_TASK_TRANSLATION, _no_autocast) == first
    with torch.no_grad():
        m.eval()
        assert abs(float(TranslationTask.batch_loss(HOST, m, batches[0])[0]) - first) <= TOL
