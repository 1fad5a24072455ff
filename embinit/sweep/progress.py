"""Terminal progress of a sweep: trials done / running / pending / failed, elapsed time and ETA."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from ray.tune import Callback


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


class Progress(Callback):
    """Counts embinit trials (a Tune trial holds `per_unit` of them) and prints a line every `every`
    seconds and at each change of state; `sink`, when given, receives the counts instead."""

    def __init__(self, total: int, reused: int, per_unit: int = 1, every: float = 10.0,
                 sink: Callable[[dict[str, Any]], None] | None = None, stream=None):
        self.total, self.reused, self.per_unit, self.every = total, reused, per_unit, every
        self.sink, self.stream = sink, stream  # None: whatever sys.stderr is when printing
        self.running: set[str] = set()
        self.done = self.failed = 0
        self.start = time.monotonic()
        self._last = 0.0

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

    def emit(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every:
            return
        self._last = now
        if self.sink is not None:
            self.sink(self.counts())
        else:
            print(self.line(), file=self.stream or sys.stderr, flush=True)

    def __getstate__(self) -> dict:
        # Tune pickles its callbacks into its experiment state: streams and a caller's sink may not
        # pickle, and only the live callback ever reports.
        return {**self.__dict__, "sink": None, "stream": None}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running.add(trial.trial_id)
        self.emit(force=True)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.running.discard(trial.trial_id)
        per = int((trial.last_result or {}).get("embinit_trials", self.per_unit))  # a fused group's size
        failed = min(per, int((trial.last_result or {}).get("embinit_failed", 0)))
        self.failed += failed
        self.done += per - failed
        self.emit(force=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.running.discard(trial.trial_id)
        self.failed += self.per_unit
        self.emit(force=True)

    def on_step_end(self, iteration, trials, **info):
        self.emit()
