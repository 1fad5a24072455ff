"""Terminal progress of a sweep: trials done / running / pending / failed, elapsed time and ETA, and per
running trial its epoch, best-so-far selection metric and ETA (both ETAs from epoch times, see
embinit.sweep.eta). On a terminal the block is redrawn in
place (a live table); piped to a file it is printed as plain lines every `every` seconds."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from ray.tune import Callback

from embinit.sweep.eta import TrialClock, sweep_eta, unit_estimate


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


@dataclass
class TrialProgress:
    name: str
    clock: TrialClock
    best: float = math.nan

    @property
    def epoch(self) -> int:
        return self.clock.epoch

    def row(self, now: float) -> tuple[str, str, str, str]:
        c = self.clock
        epoch = f"{c.epoch}/{c.epochs}" if c.epochs else (str(c.epoch) if c.epoch else "-")
        best = f"{self.best:.4g}" if math.isfinite(self.best) else "-"
        eta = c.eta_s(now)
        return self.name, epoch, best, _clock(eta) if eta is not None else "?"


class Progress(Callback):
    """Counts embinit trials (a Tune trial holds `per_unit` of them) and prints a line every `every`
    seconds and at each change of state; `sink`, when given, receives the counts instead. ETAs come
    from epoch times (embinit.sweep.eta) read on `clock` (a simulated one in tests); `metric` names the
    best-so-far column (the selection metric, e.g. val/loss)."""

    def __init__(self, total: int, reused: int, per_unit: int = 1, every: float = 10.0,
                 sink: Callable[[dict[str, Any]], None] | None = None, stream=None,
                 clock: Callable[[], float] = time.monotonic, metric: str | None = None,
                 unit_sizes: list[int] | None = None):
        self.total, self.reused, self.per_unit, self.every = total, reused, per_unit, every
        self.sink, self.stream, self.clock, self.metric = sink, stream, clock, metric
        self.unit_sizes = unit_sizes      # trials of each unit (a Tune trial's config["unit"]): fused groups
        self.running: dict[str, int] = {}   # running Tune trials -> the embinit trials each holds
        self.trials: dict[str, TrialProgress] = {}  # running Tune trials by id
        self.retrying: dict[str, TrialProgress] = {}  # errored Tune trials waiting for Tune's retry, by id
        self.done = self.failed = 0
        self.errors: list[str] = []       # why each Tune trial errored for good (`error_line`), in order
        self.durations: list[float] = []  # full-length estimates of the trials that ended
        self.slots = 0                    # the most Tune trials seen running at once
        self.start = clock()
        self._last = -math.inf
        self._drawn = 0  # lines of the live block drawn last time (redrawn in place on a terminal)

    def counts(self) -> dict[str, Any]:
        now = self.clock()
        elapsed = now - self.start
        finished_here = self.done + self.failed
        running = sum(self.running.values())
        pending = max(0, self.total - self.reused - finished_here - running)
        return {"total": self.total, "done": self.done + self.reused, "reused": self.reused,
                "running": running, "pending": pending, "failed": self.failed,
                "elapsed_s": elapsed, "eta_s": self.eta_s(now, pending, elapsed, finished_here),
                "trials": [{**dict(zip(("trial", "epoch", "best", "eta"), t.row(now))), "metric": self.metric}
                           for t in self._by_start()]}

    def eta_s(self, now: float, pending: int, elapsed: float, finished_here: int) -> float | None:
        """From epoch times once one epoch ended; else (epochs unknown) from this sweep's trial rate."""
        clocks = [t.clock for t in self.trials.values()]
        unit = unit_estimate(self.durations, clocks)
        if unit is not None:
            # a trial without an ended epoch yet: one trial's duration (the share of its epochs left when
            # it resumed after some), less the time it has run
            left = [c.eta_s(now) if c.per_epoch_s() is not None else max(0.0, unit * _share_left(c) - (now - c.started))
                    for c in clocks]
            return sweep_eta(left, math.ceil(pending / self._unit_size()), unit, self.slots)
        return elapsed / finished_here * (pending + sum(self.running.values())) if finished_here else None

    def _unit_size(self) -> float:
        """Trials per unit, on average (the units still pending are not known one by one)."""
        return sum(self.unit_sizes) / len(self.unit_sizes) if self.unit_sizes else self.per_unit

    def _by_start(self) -> list[TrialProgress]:
        return sorted(self.trials.values(), key=lambda t: t.clock.started)

    def line(self) -> str:
        c = self.counts()
        eta = _clock(c["eta_s"]) if c["eta_s"] is not None else "?"
        return (f"[embinit] {c['done']}/{c['total']} done ({c['reused']} reused), {c['running']} running, "
                f"{c['pending']} pending, {c['failed']} failed | elapsed {_clock(c['elapsed_s'])} | ETA {eta}")

    def table(self) -> list[str]:
        """One line per running trial: name, epoch (of the planned epochs), best so far, ETA."""
        now = self.clock()
        rows = [t.row(now) for t in self._by_start()]
        if not rows:
            return []
        rows.insert(0, ("running trial", "epoch", f"best {self.metric}" if self.metric else "best", "ETA"))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]

    def emit(self, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._last < self.every:
            return
        self._last = now
        if self.sink is not None:
            self.sink(self.counts())
            return
        stream = self.stream or sys.stderr
        block = [self.line(), *self.table()]
        if _live(stream):
            # redraw in place: move up over the last block, clear it, draw the new one
            prefix = f"\x1b[{self._drawn}F\x1b[J" if self._drawn else ""
            print(prefix + "\n".join(block), file=stream, flush=True)
            self._drawn = len(block)
        else:  # plain lines: the per-trial rows with the periodic line, not at every change of state
            print("\n".join(block if not force else block[:1]), file=stream, flush=True)

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks into its experiment state: streams, a caller's sink and a test's
        # clock may not pickle, and only the live callback ever reports.
        return {**self.__dict__, "sink": None, "stream": None, "clock": time.monotonic}

    def on_trial_start(self, iteration, trials, trial, **info):
        unit = (getattr(trial, "config", None) or {}).get("unit")
        sized = self.unit_sizes is not None and isinstance(unit, int) and 0 <= unit < len(self.unit_sizes)
        self.running[trial.trial_id] = self.unit_sizes[unit] if sized else self.per_unit
        self.slots = max(self.slots, len(self.running))
        before = self.trials.get(trial.trial_id) or self.retrying.pop(trial.trial_id, None)
        self.trials[trial.trial_id] = _started(trial, before, self.clock())
        self.emit(force=True)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        t = self.trials.get(trial.trial_id)
        if t is None or "embinit_epoch" not in result:
            return
        epochs = result.get("embinit_epochs")
        epochs = int(epochs) if isinstance(epochs, (int, float)) and math.isfinite(epochs) else None
        if result.get("embinit_resumed"):   # where a resumed trial starts: no epoch ended here, none timed
            t.clock.resumed_at(int(result["embinit_epoch"]), epochs)
        else:
            t.clock.epoch_end(int(result["embinit_epoch"]), epochs, self.clock())
        best = result.get("embinit_best")
        t.best = float(best) if isinstance(best, (int, float)) else math.nan
        self.emit()

    def _ended(self, trial) -> int:
        """The embinit trials the ended Tune trial held."""
        held = self.running.pop(trial.trial_id, self.per_unit)
        t = self.trials.pop(trial.trial_id, None) or self.retrying.pop(trial.trial_id, None)
        full = t.clock.full_s() if t is not None else None
        if full is not None:
            self.durations.append(full)
        return held

    def on_trial_complete(self, iteration, trials, trial, **info):
        held = self._ended(trial)
        per = int((trial.last_result or {}).get("embinit_trials", held))  # a fused group's size
        failed = min(per, int((trial.last_result or {}).get("embinit_failed", 0)))
        # trials another sweep finished while this one waited for their key: reused, not done here
        reused = min(per - failed, int((trial.last_result or {}).get("embinit_reused", 0)))
        self.failed += failed
        self.reused += reused
        self.done += per - failed - reused
        self.emit(force=True)

    def on_trial_recover(self, iteration, trials, trial, **info):
        """The trial errored (its node died) and Tune will retry it: until the retry starts it runs
        nowhere, so it counts as pending and leaves the running table (a row frozen at its last epoch with
        ETA 0m00s, counted running beside the trials that do run, until a slot freed for it); its row is
        kept for the retry, which resumes from its checkpoint (`_started`)."""
        self.running.pop(trial.trial_id, None)
        row = self.trials.pop(trial.trial_id, None)
        if row is not None:
            self.retrying[trial.trial_id] = row
        self.emit(force=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.failed += self._ended(trial)
        self.errors.append(f"{trial}: {error_line(trial)}")
        self.emit(force=True)

    def on_step_end(self, iteration, trials, **info):
        self.emit()


def error_line(trial) -> str:
    """The last line of the error Tune wrote for `trial` (its `error.txt` on the driver's node), e.g.
    `botocore.exceptions.EndpointConnectionError: Could not connect to ...`: a trial that fails before its
    MLflow run exists (its key's claim, a node without the store's endpoint) leaves no other trace."""
    try:
        with open(getattr(trial, "error_file", None), errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except (OSError, TypeError):   # no file (Tune wrote none), or none named
        return "(Tune kept no error text)"
    return lines[-1] if lines else "(Tune kept no error text)"


def _started(trial, before: TrialProgress | None, now: float) -> TrialProgress:
    """A Tune trial's row from its (re)start. Tune retries a failed trial under the same id, calling
    `on_trial_start` again: the retry resumes from its checkpoint, so its row keeps the epoch, the planned
    epochs, the best so far and the epoch time measured before (its ETA until a new epoch ends), rather
    than showing `-` as if it began again."""
    if before is None:
        return TrialProgress(str(trial), TrialClock(now))
    clock = TrialClock(now, epoch=before.epoch, epochs=before.clock.epochs, prior_s=before.clock.per_epoch_s())
    return TrialProgress(str(trial), clock, best=before.best)


def _share_left(c: TrialClock) -> float:
    """The share of a trial's epochs still to train (a resumed trial's after its checkpoint's epoch)."""
    return max(0, c.epochs - c.epoch) / c.epochs if c.epochs else 1.0


def _live(stream) -> bool:
    """Redraw in place only on a real terminal that understands ANSI cursor moves."""
    import os
    try:
        return stream.isatty() and os.environ.get("TERM", "dumb") != "dumb"
    except (AttributeError, ValueError):
        return False
