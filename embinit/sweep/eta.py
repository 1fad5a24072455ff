"""Time-left estimates of a sweep from epoch times (issue 22 item 9), as plain arithmetic on a clock's
readings, so they are tested against a simulated clock.

A trial's ETA is its time per epoch so far times the epochs it has left, minus the time since its last
epoch ended: it counts down between epochs instead of growing. The sweep's ETA packs the work left into
the parallelism seen: each running trial holds a slot until its ETA, each pending trial then takes the
first free slot for one trial's estimated duration; the ETA is when the last slot frees. Both exist as
soon as one epoch has finished, long before the first trial does.
"""

from __future__ import annotations

import heapq
import math
import statistics
from dataclasses import dataclass


@dataclass
class TrialClock:
    """One running trial's timing: when it started, when its last epoch ended, and its epochs."""
    started: float
    epoch: int = 0            # the last epoch that ended (a resumed trial starts past 0)
    epochs: int | None = None
    epochs_seen: int = 0      # epochs that ended while this sweep watched
    last_at: float | None = None
    prior_s: float | None = None  # seconds per epoch measured before a retry, until an epoch ends again

    def resumed_at(self, epoch: int, epochs: int | None) -> None:
        """Where a resumed trial starts (after `epoch` of `epochs`): no epoch ended here, none is timed."""
        self.epoch, self.epochs = epoch, epochs

    def epoch_end(self, epoch: int, epochs: int | None, now: float) -> None:
        self.epoch, self.epochs, self.last_at = epoch, epochs, now
        self.epochs_seen += 1

    def per_epoch_s(self) -> float | None:
        if not self.epochs_seen or self.last_at is None:
            return self.prior_s
        return (self.last_at - self.started) / self.epochs_seen

    def eta_s(self, now: float) -> float | None:
        per = self.per_epoch_s()
        if per is None or not self.epochs:
            return None
        since = self.last_at if self.last_at is not None else self.started
        return max(0.0, per * (self.epochs - self.epoch) - (now - since))

    def full_s(self) -> float | None:
        """What a fresh trial like this one takes from start to end."""
        per = self.per_epoch_s()
        return None if per is None or not self.epochs else per * self.epochs


def unit_estimate(durations: list[float], running: list[TrialClock]) -> float | None:
    """One trial's duration: the mean of those seen to the end, else of the running ones' projections."""
    seen = [d for d in durations if math.isfinite(d)]
    if not seen:
        seen = [d for d in (t.full_s() for t in running) if d is not None]
    return statistics.fmean(seen) if seen else None


def sweep_eta(running: list[float | None], pending: int, unit_s: float | None, slots: int) -> float | None:
    """Seconds until the last trial ends: `running` ETAs (None: unknown, taken as a whole `unit_s`),
    `pending` trials of `unit_s` each, at most `slots` at a time."""
    if not running and not pending:
        return 0.0
    if unit_s is None and (pending or any(r is None for r in running)):
        return None
    free = [r if r is not None else unit_s for r in running]
    free += [0.0] * max(0, max(slots, 1) - len(free))
    heapq.heapify(free)
    for _ in range(pending):
        heapq.heappush(free, heapq.heappop(free) + unit_s)
    return max(free)
