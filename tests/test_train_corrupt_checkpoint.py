"""A corrupted `last.pt` (issue 20, item 10): the trial trains from scratch with a warning, in the same
out_dir (so, in a sweep, the same MLflow run), instead of failing every rerun."""

from __future__ import annotations

import pytest

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.train import run_trial

TIMING = ("tokens_per_s", "time_s")


def small(**kw) -> TrialConfig:
    return TrialConfig(task="synthetic_translation", threads=1, epochs=2, max_train_examples=300,
                       extras={"val_bleu": False}, **kw)


def losses(history):
    return [{k: v for k, v in h.items() if k not in TIMING} for h in history]


class Stop(Exception):
    pass


class Events:
    def __init__(self, stop_after: int | None = None):
        self.epochs, self.stop_after = [], stop_after

    def on_epoch_end(self, ctx, epoch, metrics):
        self.epochs.append(epoch)
        if epoch == self.stop_after:
            raise Stop(epoch)


@pytest.mark.slow
def test_a_corrupted_last_pt_trains_from_scratch_with_a_warning(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "trial"
    full = run_trial(small(), cache_dir=cache)
    with pytest.raises(Stop):
        run_trial(small(), out_dir=out, callbacks=(Events(stop_after=1),), cache_dir=cache)
    (out / "last.pt").write_bytes(b"half a pickle")   # e.g. written while the disk was full
    seen = Events()
    with pytest.warns(RuntimeWarning, match=r"cannot read checkpoint .*last\.pt.*; training trial \w+ from "
                                            r"scratch \(the file is kept as last\.pt\.corrupt\)"):
        again = run_trial(small(), out_dir=out, callbacks=(seen,), cache_dir=cache)
    assert seen.epochs == [1, 2]                                   # from epoch 1, not a failure
    assert again.status == "finished" and losses(again.history) == losses(full.history)
    assert (out / "last.pt.corrupt").read_bytes() == b"half a pickle"
    assert (out / "last.pt").is_file()                             # the new run's own checkpoint


def test_a_last_pt_of_another_trial_is_still_refused(tmp_path):
    from embinit.train.checkpoint import resume_state
    import torch

    torch.save({"key": "someone-else"}, tmp_path / "last.pt")
    with pytest.raises(EmbinitError, match="belongs to trial 'someone-else'"):
        resume_state(tmp_path, "mine")
    assert (tmp_path / "last.pt").is_file()
