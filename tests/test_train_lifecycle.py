"""The one trial lifecycle (embinit.train.lifecycle) that `run_trial` and `run_fused` share: the
decisions at an epoch's end (best checkpoint, patience, `last.pt`) and where a resumed member starts.
The validation metrics are scripted, so each decision is pinned without training."""

from __future__ import annotations

import pytest
import torch

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.train import checkpoint as ckpt
from embinit.train.lifecycle import BestTracker, epoch_end, finish, start
from embinit.train.prepare import prepare

CFG = TrialConfig(task="synthetic_lm", epochs=6, early_stopping_patience=2, max_train_examples=32, threads=1)


class Recorder:
    def __init__(self):
        self.epochs = []

    def on_epoch_end(self, ctx, epoch, metrics):
        self.epochs.append((epoch, metrics["val/ppl"]))


def _member(out, callbacks=(), resume=True):
    return start(CFG, prepare(CFG, cache_dir=False), out, callbacks, resume)


def _scripted(m, values):
    """The member's validation returns these perplexities, one per epoch."""
    it = iter(values)
    m.task.validate = lambda model: {"val/loss": 0.0, "val/ppl": next(it)}


def test_best_tracker_criterion_and_nan():
    t = BestTracker([("val/loss", "min"), ("val/bleu", "max")])
    assert t.update({"val/loss": 2.0, "val/bleu": 10.0}, 1)
    assert not t.update({"val/loss": 2.5, "val/bleu": 20.0}, 2)      # only the criterion decides
    assert not t.update({"val/loss": float("nan"), "val/bleu": 5.0}, 3)
    assert t.best_epoch == 1
    assert t.summary() == {"val/loss": 2.0, "val/loss_epoch": 1, "val/bleu": 20.0, "val/bleu_epoch": 2}


def test_a_nan_criterion_at_the_first_epoch_is_no_best(tmp_path):
    """A first validation of NaN (the epoch's last update broke the weights, or bf16 overflow in
    evaluation) is no improvement: no best.pt of those weights, no best epoch, and patience counts from
    the first finite best (it was `epoch - None`: a TypeError failed the trial)."""
    t = BestTracker([("val/loss", "min")])
    assert not t.update({"val/loss": float("nan")}, 1) and t.best_epoch is None and t.summary() == {}
    m = _member(tmp_path)
    _scripted(m, [float("nan"), 5.0, 6.0, 7.0])
    epoch_end(m, 1, train_loss=1.0, tokens=10, seconds=1.0, t0=0.0)
    assert not m.stopped and not (tmp_path / ckpt.BEST).exists()
    for epoch in (2, 3, 4):
        epoch_end(m, epoch, train_loss=1.0, tokens=10, seconds=1.0, t0=0.0)
    assert m.tracker.best_epoch == 2 and m.stopped                  # 4 - 2 >= patience 2
    assert ckpt.load_best(tmp_path / ckpt.BEST)["epoch"] == 2


def test_a_resumed_tracker_takes_a_newly_tracked_metric_from_the_checkpoint_history():
    """A checkpoint written before a metric was tracked (a classifier's `val/loss`) has no best for it:
    the resumed tracker replays the history for it, so its best is over every epoch, not only those
    after the resume; a metric the state has keeps the state's value."""
    history = [{"epoch": 1, "val/acc": 0.6, "val/loss": 0.9}, {"epoch": 2, "val/acc": 0.7, "val/loss": 0.5},
               {"epoch": 3, "val/acc": 0.8, "val/loss": float("nan")}]
    t = BestTracker([("val/acc", "max"), ("val/loss", "min")], {"val/acc": [0.8, 3]}, history)
    assert t.state == {"val/acc": [0.8, 3], "val/loss": [0.5, 2]}
    assert not t.update({"val/acc": 0.75, "val/loss": 0.4}, 4)
    assert t.summary() == {"val/acc": 0.8, "val/acc_epoch": 3, "val/loss": 0.4, "val/loss_epoch": 4}


def test_epoch_end_keeps_the_best_and_stops_after_patience(tmp_path):
    rec = Recorder()
    m = _member(tmp_path, [rec])
    _scripted(m, [5.0, 3.0, 4.0, 3.5])
    for epoch in range(1, 5):
        epoch_end(m, epoch, train_loss=1.0, tokens=10, seconds=1.0, t0=0.0)
        assert m.stopped == (epoch == 4)                  # 4 - best epoch 2 >= patience 2
    assert m.tracker.best_epoch == 2
    assert ckpt.load_best(tmp_path / ckpt.BEST)["epoch"] == 2
    progress = ckpt.load_last(tmp_path, m.key)["progress"]
    assert progress["epoch"] == 4 and progress["stopped"] is True
    assert [h["epoch"] for h in progress["history"]] == [1, 2, 3, 4]
    assert rec.epochs == [(1, 5.0), (2, 3.0), (3, 4.0), (4, 3.5)]


def test_a_resumed_member_starts_after_its_last_epoch(tmp_path):
    m = _member(tmp_path)
    _scripted(m, [5.0, 3.0])
    for epoch in (1, 2):
        m.ctx.step += 7
        epoch_end(m, epoch, train_loss=1.0, tokens=10, seconds=1.0, t0=0.0)
    again = _member(tmp_path)
    assert (again.start_epoch, again.stopped, again.ctx.step) == (3, False, 14)
    assert again.tracker.best_epoch == 2 and [h["epoch"] for h in again.history] == [1, 2]
    assert again.init_stats == m.init_stats
    fresh = _member(tmp_path, resume=False)
    assert (fresh.start_epoch, fresh.history) == (1, [])


def test_a_finished_member_resumes_stopped(tmp_path):
    m = _member(tmp_path)
    _scripted(m, [5.0, 4.0, 3.0, 2.0, 1.0, 0.5])
    for epoch in range(1, 7):
        epoch_end(m, epoch, train_loss=1.0, tokens=10, seconds=1.0, t0=0.0)
    assert not m.stopped                                  # improving: only the last epoch ends it
    again = _member(tmp_path)
    assert again.stopped and again.start_epoch == 7


@pytest.mark.parametrize("status", ["finished", "diverged"])
def test_finish_tests_the_best_checkpoint_only_when_finished(tmp_path, status):
    m = _member(tmp_path)
    _scripted(m, [5.0, 3.0, 4.0])
    for epoch in (1, 2, 3):
        epoch_end(m, epoch, train_loss=1.0, tokens=10, seconds=1.0, t0=0.0)
    m.status = status
    result = finish(m, {"mode": "fused", "group_size": 2}, t0=0.0)
    assert result.best_epoch == 2 and result.info["execution"] == {"mode": "fused", "group_size": 2}
    if status == "finished":
        assert result.checkpoint_path == str(tmp_path / ckpt.BEST) and "test/ppl" in result.test
    else:
        assert result.checkpoint_path is None and not result.test


def test_finish_refuses_a_best_checkpoint_of_another_epoch_than_the_best(tmp_path):
    """An attempt cut off between best.pt and last.pt leaves best.pt of an epoch the resumed history does
    not hold; if that epoch's rerun is not best again, best.pt is not the best epoch's weights. Testing it
    would give another epoch's metrics under the best epoch's name: finish says so instead."""
    m = _member(tmp_path)
    _scripted(m, [5.0, 3.0])
    for epoch in (1, 2):
        epoch_end(m, epoch, train_loss=1.0, tokens=10, seconds=1.0, t0=0.0)
    ckpt.save_best(tmp_path, m.s.model, CFG.to_dict(), {}, epoch=3)   # epoch 3's best.pt, then cut off
    again = _member(tmp_path)
    assert again.start_epoch == 3 and again.tracker.best_epoch == 2
    _scripted(again, [4.0])                                              # the rerun of epoch 3: not best
    epoch_end(again, 3, train_loss=1.0, tokens=10, seconds=1.0, t0=0.0)
    again.status = "finished"
    with pytest.raises(EmbinitError, match=r"epoch 3, but the trial's best epoch is 2"):
        finish(again, {"mode": "single"}, t0=0.0)


@pytest.mark.parametrize("folder", [True, False])
def test_the_test_metrics_are_the_best_epochs_weights(tmp_path, folder):
    """The weights differ at each epoch's end; the test metrics are computed on the best epoch's (from
    best.pt, or kept in memory without a folder), not on the last epoch's."""
    m = _member(tmp_path if folder else None)
    _scripted(m, [5.0, 3.0, 4.0])
    weights = []
    for epoch in (1, 2, 3):
        with torch.no_grad():
            for p in m.model.parameters():
                p.mul_(0.5 + 0.25 * epoch)
        weights.append({k: v.clone() for k, v in m.model.state_dict().items()})
        epoch_end(m, epoch, train_loss=1.0, tokens=10, seconds=1.0, t0=0.0)
    result = finish(m, {"mode": "single"}, t0=0.0)
    for k, v in m.model.state_dict().items():
        assert torch.equal(v, weights[1][k]), k
    m.model.load_state_dict(weights[1])
    assert result.test == m.task.test(m.model)
    m.model.load_state_dict(weights[2])
    assert result.test != m.task.test(m.model)
