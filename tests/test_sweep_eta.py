"""ETAs that count down (issue 22 item 9), against a simulated clock: a trial's ETA comes from its epoch
times and falls between epochs; the sweep's ETA exists once one epoch has ended (before any trial
finishes) and packs the remaining trials into the parallelism seen."""

from __future__ import annotations

import io
from types import SimpleNamespace

from embinit.sweep.eta import TrialClock, sweep_eta
from embinit.sweep.progress import Progress


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class _Trial(SimpleNamespace):
    def __str__(self):   # Tune's trial prints its name
        return self.trial_id


def trial(tid, last=None):
    return _Trial(trial_id=tid, last_result=last or {})


def _epoch(p, tid, epoch, epochs=5, best=2.5):
    p.on_trial_result(0, [], trial(tid), {"embinit_epoch": epoch, "embinit_epochs": epochs, "embinit_best": best})


def test_sweep_eta_packs_the_remaining_trials_into_the_parallelism():
    assert sweep_eta([], 4, 10.0, slots=2) == 20.0 and sweep_eta([], 4, 10.0, slots=1) == 40.0
    assert sweep_eta([5.0, 30.0], 2, 10.0, slots=2) == 30.0    # both pending fit beside the long one
    assert sweep_eta([None], 0, 10.0, slots=1) == 10.0 and sweep_eta([None], 1, None, slots=1) is None
    assert sweep_eta([], 0, None, slots=0) == 0.0


def test_a_trial_eta_counts_down_between_epochs():
    c = TrialClock(started=0.0)
    assert c.eta_s(5.0) is None
    c.epoch_end(1, 5, now=10.0)
    assert [c.eta_s(t) for t in (10.0, 15.0, 19.0, 60.0)] == [40.0, 35.0, 31.0, 0.0]
    resumed = TrialClock(started=0.0, epoch=3)         # resumed after epoch 3: only its own epochs count
    resumed.epoch_end(4, 5, now=10.0)
    assert resumed.eta_s(10.0) == 10.0 and resumed.full_s() == 50.0


def test_progress_eta_before_the_first_trial_ends_and_labelled_columns():
    clock, out, seen = Clock(), io.StringIO(), []
    p = Progress(total=4, reused=0, every=0.0, stream=out, clock=clock, metric="val/loss")
    p.on_trial_start(0, [], trial("a"))
    p.on_trial_start(0, [], trial("b"))
    assert p.counts()["eta_s"] is None                    # nothing to go on yet
    clock.t += 10                                         # a's first of 5 epochs: 10 s
    _epoch(p, "a", 1)
    # a: 40 s left; b (no epoch yet): one trial (50 s) less the 10 s it ran; then 2 pending on 2 slots
    assert p.counts()["eta_s"] == 90.0
    clock.t += 5
    c = p.counts()
    assert c["eta_s"] == 85.0 and c["trials"][0] == {"trial": "a", "epoch": "1/5", "best": "2.5", "eta": "0m35s",
                                            "metric": "val/loss"}
    p.sink = seen.append
    p.emit(force=True)
    assert seen[-1]["eta_s"] == 85.0 and seen[-1]["done"] == 0   # what the service's eta_s is made of
    p.sink = None
    p.emit()   # the periodic block: the counts line, then the per-trial table
    header = out.getvalue().splitlines()[-3]
    assert header.split() == ["running", "trial", "epoch", "best", "val/loss", "ETA"]


def test_a_retried_trial_keeps_its_epoch_and_best_and_its_eta_counts_only_what_is_left():
    """Tune retries a failed trial under the same id and calls on_trial_start again: the retry resumes
    from its checkpoint, so the row says where it is (not `-`), and its ETA is the epochs left, not a
    whole trial."""
    clock = Clock()
    p = Progress(total=1, reused=0, every=0.0, stream=io.StringIO(), clock=clock, metric="val/loss")
    p.on_trial_start(0, [], trial("a"))
    for epoch in (1, 2, 3):
        clock.t += 10
        _epoch(p, "a", epoch, epochs=5, best=3.0 - epoch / 10)
    assert p.counts()["eta_s"] == 20.0
    p.on_trial_recover(0, [], trial("a"))   # its node died: Tune schedules a retry
    clock.t += 4
    p.on_trial_start(0, [], trial("a"))     # the retry, same trial id
    (row,) = p.counts()["trials"]
    assert (row["epoch"], row["best"]) == ("3/5", "2.7")
    # 2 of 5 epochs left of a 50 s trial (the running projection): 20 s, none of it run yet
    assert p.counts()["eta_s"] == 20.0 and p.counts()["running"] == 1
    clock.t += 8
    assert p.counts()["eta_s"] == 12.0
    _epoch(p, "a", 4, epochs=5, best=2.6)    # its first epoch after the retry: 8 s, 1 left
    (row,) = p.counts()["trials"]
    assert (row["epoch"], row["best"], row["eta"]) == ("4/5", "2.6", "0m08s")


def test_a_trial_waiting_for_its_retry_counts_pending_not_running():
    """Between its node's death (on_trial_recover) and the retry's start a trial runs nowhere: seen on a
    two-worker cluster with one worker killed, it stayed in the running table at its last epoch with ETA
    0m00s, and counted running beside the trial that held the one slot left, for minutes."""
    clock = Clock()
    p = Progress(total=2, reused=0, every=0.0, stream=io.StringIO(), clock=clock, metric="val/loss")
    p.on_trial_start(0, [], trial("a"))
    p.on_trial_start(0, [], trial("b"))
    clock.t += 10
    _epoch(p, "a", 1, epochs=5, best=2.9)
    p.on_trial_recover(0, [], trial("a"))   # its node died: Tune schedules a retry
    c = p.counts()
    assert (c["running"], c["pending"]) == (1, 1)
    assert [r["trial"] for r in c["trials"]] == ["b"]
    p.on_trial_start(0, [], trial("a"))     # the retry starts where the row left off
    c = p.counts()
    assert c["running"] == 2 and {r["trial"]: r["epoch"] for r in c["trials"]}["a"] == "1/5"


def test_a_trial_tune_gives_up_on_keeps_the_last_line_of_its_error(tmp_path):
    """What a sweep's result says of a trial that errored before its MLflow run existed (test_service_driver)."""
    error = tmp_path / "error.txt"
    error.write_text("Failure # 1\nTraceback (most recent call last):\n  File x\nOSError: store unreachable\n\n")
    p = Progress(total=2, reused=0, every=0.0, stream=io.StringIO())
    p.on_trial_start(0, [], trial("a"))
    p.on_trial_error(0, [], _Trial(trial_id="a", last_result={}, error_file=str(error)))
    p.on_trial_start(0, [], trial("b"))
    p.on_trial_error(0, [], _Trial(trial_id="b", last_result={}, error_file=None))
    assert p.errors == ["a: OSError: store unreachable", "b: (Tune kept no error text)"]
    assert p.counts()["failed"] == 2


def test_a_resumed_trial_shows_its_epoch_and_best_from_its_start_and_its_eta_counts_no_epoch():
    """A trial that resumes from its checkpoint (the spec run again after an interruption) reports the
    epoch it resumes after and its best so far when it starts (`embinit_resumed`): its row shows them at
    once, not `-` until its next epoch ends; no epoch ended here, so its time per epoch is measured from
    its next one, and until then the sweep's ETA counts only its epochs left."""
    clock = Clock()
    p = Progress(total=2, reused=0, every=0.0, stream=io.StringIO(), clock=clock, metric="val/loss")
    p.on_trial_start(0, [], trial("fresh"))
    clock.t += 10
    _epoch(p, "fresh", 1, epochs=5, best=3.0)      # 10 s an epoch: a 50 s trial
    p.on_trial_start(0, [], trial("resumed"))
    clock.t += 2
    p.on_trial_result(0, [], trial("resumed"), {"embinit_epoch": 3, "embinit_epochs": 5, "embinit_best": 2.4,
                                                "embinit_resumed": 1, "objective": 2.5})
    row = p.counts()["trials"][1]
    assert (row["trial"], row["epoch"], row["best"], row["eta"]) == ("resumed", "3/5", "2.4", "?")
    assert p.trials["resumed"].clock.per_epoch_s() is None       # the report timed no epoch
    # fresh: 40 s less the 2 s since its epoch; resumed: 2 of 5 epochs of a 50 s trial, less the 2 s it ran
    assert p.counts()["eta_s"] == 38.0
    clock.t += 10
    _epoch(p, "resumed", 4, epochs=5, best=2.3)   # its first epoch here: 12 s from its start, 1 left
    row = p.counts()["trials"][1]
    assert (row["epoch"], row["best"], row["eta"]) == ("4/5", "2.3", "0m12s")
