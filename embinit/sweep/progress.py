"""Terminal progress of a sweep: trials done / running / pending / failed, elapsed time and ETA, and per
running trial its epoch, best-so-far selection metric and ETA. On a terminal the block is redrawn in
place (a live table); piped to a file it is printed as plain lines every `every` seconds."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from ray.tune import Callback


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


@dataclass
class TrialProgress:
    name: str
    started: float
    epoch: int = 0
    epochs: int | None = None
    best: float = math.nan
    epochs_seen: int = 0  # epochs this sweep saw (a resumed trial starts past epoch 1)

    def eta_s(self, now: float) -> float | None:
        if not self.epochs or not self.epochs_seen:
            return None
        per_epoch = (now - self.started) / self.epochs_seen
        return max(0.0, per_epoch * (self.epochs - self.epoch))

    def row(self, now: float) -> tuple[str, str, str, str]:
        epoch = f"{self.epoch}/{self.epochs}" if self.epochs else (str(self.epoch) if self.epoch else "-")
        best = f"{self.best:.4g}" if math.isfinite(self.best) else "-"
        eta = self.eta_s(now)
        return self.name, epoch, best, _clock(eta) if eta is not None else "?"


class Progress(Callback):
    """Counts embinit trials (a Tune trial holds `per_unit` of them) and prints a line every `every`
    seconds and at each change of state; `sink`, when given, receives the counts instead."""

    def __init__(self, total: int, reused: int, per_unit: int = 1, every: float = 10.0,
                 sink: Callable[[dict[str, Any]], None] | None = None, stream=None):
        self.total, self.reused, self.per_unit, self.every = total, reused, per_unit, every
        self.sink, self.stream = sink, stream  # None: whatever sys.stderr is when printing
        self.running: set[str] = set()
        self.trials: dict[str, TrialProgress] = {}  # running Tune trials by id
        self.done = self.failed = 0
        self.start = time.monotonic()
        self._last = 0.0
        self._drawn = 0  # lines of the live block drawn last time (redrawn in place on a terminal)

    def counts(self) -> dict[str, Any]:
        elapsed = time.monotonic() - self.start
        finished_here = self.done + self.failed
        running = len(self.running) * self.per_unit
        pending = max(0, self.total - self.reused - finished_here - running)
        remaining = pending + running
        eta = elapsed / finished_here * remaining if finished_here else None
        return {"total": self.total, "done": self.done + self.reused, "reused": self.reused,
                "running": running, "pending": pending, "failed": self.failed,
                "elapsed_s": elapsed, "eta_s": eta}

    def line(self) -> str:
        c = self.counts()
        eta = _clock(c["eta_s"]) if c["eta_s"] is not None else "?"
        return (f"[embinit] {c['done']}/{c['total']} done ({c['reused']} reused), {c['running']} running, "
                f"{c['pending']} pending, {c['failed']} failed | elapsed {_clock(c['elapsed_s'])} | ETA {eta}")

    def table(self) -> list[str]:
        """One line per running trial: name, epoch (of the planned epochs), best so far, ETA."""
        now = time.monotonic()
        rows = [t.row(now) for t in sorted(self.trials.values(), key=lambda t: t.started)]
        if not rows:
            return []
        rows.insert(0, ("running trial", "epoch", "best", "ETA"))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]

    def emit(self, force: bool = False) -> None:
        now = time.monotonic()
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
        # Tune pickles its callbacks into its experiment state: streams and a caller's sink may not
        # pickle, and only the live callback ever reports.
        return {**self.__dict__, "sink": None, "stream": None}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running.add(trial.trial_id)
        self.trials[trial.trial_id] = TrialProgress(str(trial), time.monotonic())
        self.emit(force=True)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        t = self.trials.get(trial.trial_id)
        if t is None or "embinit_epoch" not in result:
            return
        t.epoch, t.epochs_seen = int(result["embinit_epoch"]), t.epochs_seen + 1
        epochs = result.get("embinit_epochs")
        t.epochs = int(epochs) if isinstance(epochs, (int, float)) and math.isfinite(epochs) else None
        best = result.get("embinit_best")
        t.best = float(best) if isinstance(best, (int, float)) else math.nan
        self.emit()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.running.discard(trial.trial_id)
        self.trials.pop(trial.trial_id, None)
        per = int((trial.last_result or {}).get("embinit_trials", self.per_unit))  # a fused group's size
        failed = min(per, int((trial.last_result or {}).get("embinit_failed", 0)))
        # trials another sweep finished while this one waited for their key: reused, not done here
        reused = min(per - failed, int((trial.last_result or {}).get("embinit_reused", 0)))
        self.failed += failed
        self.reused += reused
        self.done += per - failed - reused
        self.emit(force=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.running.discard(trial.trial_id)
        self.trials.pop(trial.trial_id, None)
        self.failed += self.per_unit
        self.emit(force=True)

    def on_step_end(self, iteration, trials, **info):
        self.emit()


def _live(stream) -> bool:
    """Redraw in place only on a real terminal that understands ANSI cursor moves."""
    import os
    try:
        return stream.isatty() and os.environ.get("TERM", "dumb") != "dumb"
    except (AttributeError, ValueError):
        return False
