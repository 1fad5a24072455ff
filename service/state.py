"""Reconciling the stored state of experiments with the truth in Ray and MLflow.

Called on startup for every unfinished experiment and on each read of one (at most once per
`refresh_interval_s` per experiment; concurrent readers never wait on each other: whoever does not get
the experiment's lock serves the stored row). A driver that answers is the truth; a driver that is gone
leaves MLflow as the truth: all trials finished means succeeded, anything else failed (or cancelled, when
a cancel was asked for), with the reason in `error`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import socket
import threading
import time
from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import ACTIVE, TERMINAL, Experiment, utcnow
from service.driver import DriverState
from service.runner import Runner
from service.settings import Settings
from service.store_guard import StoreUnavailable

log = logging.getLogger("embinit.service")

DRIVER_LOST = ("its Ray driver is gone (the node or the Ray cluster stopped) before all trials finished; "
               "submit the spec again with ?rerun=true to run the rest (finished trials are reused)")


def _ts(seconds: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc) if seconds else None


# What a running driver reports beside the counts: the sweep's ETA and its running trials (dropped once
# the experiment ends).
LIVE_KEYS = ("eta_s", "running_trials")


def settle_counts(status: str, counts: dict[str, int], n_trials: int) -> dict[str, int]:
    """Counts as the API shows them: a finished experiment has nothing running or pending. `failed` counts
    only trials whose run failed; a trial a failed or cancelled experiment stopped while it ran, or never
    started, is `cancelled` (what MLflow tags a stopped trial; neither will start it: each such trial's
    row says so too, `unrun_trial`). So `progress` (service.views: trials with a finished or failed run)
    reads the same for a lost driver as for a cancel at the same point (docs/deployment.md)."""
    out = {k: int(v) for k, v in counts.items() if k not in LIVE_KEYS}
    if status not in TERMINAL:
        return {**out, **{k: counts[k] for k in LIVE_KEYS if k in counts}}
    out["running"] = 0
    if status in ("cancelled", "failed"):
        out["pending"] = 0
        if status == "failed":
            out.setdefault("failed", 0)   # said, if only as 0: how many of a failed experiment's trials did
        # the stopped and the never started, including trials a sweep's final counts leave out (those
        # without a finished run that did not fail, driver.final_state)
        done = sum(out.get(k, 0) for k in ("finished", "failed", "reused"))
        unrun = max(0, n_trials - done)
        if unrun or status == "cancelled":
            out["cancelled"] = unrun
    return out


# Why a trial without a run will never start, once its experiment ended so (counted `cancelled`, above).
NEVER_STARTED = {"cancelled": "never started: the experiment was cancelled",
                 "failed": "never started: the experiment failed"}


def unrun_trial(status: str) -> tuple[str, str | None]:
    """(status, error) of a trial row without a run in an experiment of `status`: `pending` while it may
    still start; once a cancel or a failure ended the experiment, `cancelled` and why (it did not fail:
    it never ran)."""
    return ("cancelled", NEVER_STARTED[status]) if status in NEVER_STARTED else ("pending", None)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def owner_gone(cluster: str) -> bool:
    """Whether the drivers of another Ray cluster are gone for sure: a local cluster dies with the API
    process that started it (on this host: that process is not alive; on another host: it gave up the
    state database's lease, which this API holds). An existing cluster's drivers may still run there."""
    kind, _, rest = cluster.partition(":")
    host, _, pid = rest.partition(":")
    pid = pid.split(":", 1)[0]
    if kind != "local" or not pid.isdigit():
        return False
    return host != socket.gethostname() or not _pid_alive(int(pid))


class Reconciler:
    def __init__(self, runner: Runner, store, settings: Settings, on_finished=None, lease=None):
        self.runner, self.store, self.settings = runner, store, settings
        self.on_finished = on_finished  # called with the id of an experiment that just finished
        self.lease = lease              # service.lease.Lease: judge nothing without it
        self._cluster: str | None = None
        self._checked: dict[str, float] = {}
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)

    def refresh(self, session: Session, exp: Experiment, force: bool = False) -> Experiment:
        """Bring `exp` up to date (committing any change) and return it."""
        if exp.status in TERMINAL:
            return exp
        if not force and time.monotonic() - self._checked.get(exp.id, -1e9) < self.settings.refresh_interval_s:
            return exp
        lock = self._locks[exp.id]
        if not lock.acquire(blocking=False):
            return exp
        try:
            session.commit()  # the connection goes back to the pool: none is held across Ray and MLflow
            self._reconcile(exp)
            self._checked[exp.id] = time.monotonic()
            session.commit()
            if exp.status in TERMINAL and exp.driver:   # its end recorded first: then its driver goes (a
                self.runner.release(exp.driver)         # crash between the two loses no state)
            if exp.status in TERMINAL:  # never refreshed again: nothing of it is kept here
                self._checked.pop(exp.id, None)
                self._locks.pop(exp.id, None)   # a refresh holding it still releases its own
                if self.on_finished is not None:
                    self.on_finished(exp.id)
        except StoreUnavailable as e:  # MLflow is slow or down: the stored state is the answer for now
            log.warning("could not refresh experiment %s: %s", exp.id, e)
            session.rollback()
        except Exception:  # a read must still answer with the stored state
            log.warning("could not refresh experiment %s", exp.id, exc_info=True)
            session.rollback()
        finally:
            lock.release()
        return exp

    def refresh_active(self, session: Session) -> None:
        """Reconcile every unfinished experiment (startup, and before counting active ones)."""
        for exp in session.scalars(select(Experiment).where(Experiment.status.in_(ACTIVE))).all():
            self.refresh(session, exp)

    def judges(self, exp: Experiment) -> bool:
        """Whether this API may decide what happened to `exp`'s driver: it holds the state database's
        lease, and the driver runs in its Ray cluster (or in one that is gone, or was never recorded)."""
        if self.lease is not None and not self.lease.held:
            return False
        if exp.ray_cluster is None:
            return True
        if self._cluster is None and hasattr(self.runner, "cluster_id"):
            self._cluster = self.runner.cluster_id()
        return self._cluster is None or exp.ray_cluster == self._cluster or owner_gone(exp.ray_cluster)

    def _reconcile(self, exp: Experiment) -> None:
        if not self.judges(exp):  # another cluster's driver: the API on that cluster follows it
            log.debug("experiment %s runs in Ray cluster %s, not this API's: left as it is", exp.id,
                      exp.ray_cluster)
            return
        if not exp.driver and self._being_started(exp):
            return  # its submission is starting the driver: nothing to judge yet
        try:
            state = self.runner.poll(exp.driver) if exp.driver else None
        except TimeoutError:
            return  # exists but busy or not scheduled yet: keep what we know
        if state is None:
            state = self._without_driver(exp)
        else:
            state = self._after_grace(exp, state)
            if state.status in ("failed", "cancelled"):
                state = self._closed(exp, state)
        self._apply(exp, state)
        if exp.mlflow_experiment_id is None:
            exp.mlflow_experiment_id = self.store.experiment_id(exp)

    def _being_started(self, exp: Experiment) -> bool:
        """A queued experiment without a driver name: its submission committed the row and is starting the
        driver (`runner.start` returns once Ray knows it, then the name is recorded). Judged gone then, a
        just-submitted experiment was failed 70 ms after its creation while its trials trained
        (tests/test_cluster_netns.py: the monitor's pass fell between the two commits). After
        `driver_start_grace_s` it is judged: an API that died between the two leaves it so."""
        if exp.status != "queued" or exp.created_at is None:
            return False
        return (utcnow() - exp.created_at).total_seconds() < self.settings.driver_start_grace_s

    def _after_grace(self, exp: Experiment, state: DriverState) -> DriverState:
        """A cancelled driver that did not stop within `cancel_grace_s` is stopped hard."""
        if not exp.cancel_requested_at or state.status not in ACTIVE:
            return state
        waited = (utcnow() - exp.cancel_requested_at).total_seconds()
        if waited <= self.settings.cancel_grace_s:
            return state
        self.runner.release(exp.driver)
        return DriverState("cancelled", counts=state.counts, started_at=state.started_at,
                           finished_at=time.time(), error="stopped after the cancel grace period")

    def _closed(self, exp: Experiment, state: DriverState) -> DriverState:
        """`state`, once the runs its driver left RUNNING are closed (`_close_runs`); a store SQLite finds
        damaged never lets them close: then the state is recorded, its error naming the damage (retried,
        the experiment stayed queued for good, its error None, the damage only in the server's log)."""
        from embinit.tracking.store_check import damage_found, damaged_message
        try:
            self._close_runs(exp, state)
        except Exception as e:
            if (words := damage_found(e)) is None:
                raise
            unclosed = f"its MLflow runs could not be closed: {damaged_message(self.store.tracking_uri, words)}"
            return dataclasses.replace(state, error=f"{state.error}; {unclosed}" if state.error else unclosed)
        return state

    def _close_runs(self, exp: Experiment, state: DriverState) -> None:
        """The driver's last word was a failure (or it was stopped): nothing writes its MLflow runs any
        more, so those still RUNNING (a sweep that could not close them, e.g. on a full disk) are closed
        now. If that fails too, the error propagates: the state is not recorded and the driver not
        released, so the next refresh tries again (once the disk has room)."""
        status = "KILLED" if state.status == "cancelled" else "FAILED"
        reason = f"the experiment {state.status}" + (f": {state.error}" if state.error else "")
        closed = self.store.close_orphans(exp, reason, status)
        if closed:
            log.info("experiment %s: closed %d MLflow runs its driver left running", exp.id, closed)

    def _without_driver(self, exp: Experiment) -> DriverState:
        # Nothing writes to its MLflow runs any more (the API or Ray was killed): close the trial runs and
        # the sweep runs still RUNNING, as interrupted (`records.INTERRUPTED`, as `embinit run` closes a
        # lost driver's: the trials did not fail, so `counts.failed` leaves them out), or cancelled after a
        # cancel. A trial that kept a checkpoint stays resumable: resubmitting the spec (?rerun=true)
        # continues it, in the same run, after its last checkpointed epoch.
        from embinit.tracking.records import INTERRUPTED

        status, tag = ("KILLED", "cancelled") if exp.cancel_requested_at else INTERRUPTED
        closed = self.store.close_orphans(exp, "interrupted: the experiment's Ray driver is gone", status, tag)
        if closed:
            log.info("experiment %s: closed %d orphaned MLflow runs", exp.id, closed)
        counts = self.store.counts(exp)
        done = counts.get("finished", 0) + counts.get("reused", 0)
        if done >= exp.n_trials:   # a cancel asked for after the last trial cancelled nothing
            return DriverState("succeeded", counts=counts, finished_at=time.time())
        if exp.cancel_requested_at:
            return DriverState("cancelled", counts=counts, finished_at=time.time())
        return DriverState("failed", counts=counts, finished_at=time.time(), error=DRIVER_LOST)

    @staticmethod
    def _apply(exp: Experiment, state: DriverState) -> None:
        changed = False
        updates = {"status": state.status, "error": state.error or exp.error,
                   "started_at": exp.started_at or _ts(state.started_at),
                   "finished_at": exp.finished_at or _ts(state.finished_at)}
        # A driver that ended before reporting any counts (a spec its sweep refused) leaves the submission's
        # (`pending: N`): settled too, so a failed experiment never says that a trial is pending
        if state.counts or state.status in TERMINAL:
            updates["counts"] = settle_counts(state.status, state.counts or exp.counts or {}, exp.n_trials)
        if updates["status"] not in TERMINAL:
            updates["finished_at"] = None
        for name, value in updates.items():
            if getattr(exp, name) != value:
                setattr(exp, name, value)
                changed = True
        if changed:
            exp.updated_at = utcnow()
