"""One state database, one owner: the API process that holds its lease.

Two APIs on one state database would each reconcile the other's experiments against their own Ray and
mark them failed while they run. So the API takes a lease at startup, before it touches any experiment:
one row in the table `service_lease` naming the holder (`host:pid`) with a heartbeat, renewed every
third of `lease_ttl_s`. Another process finds the row fresh and refuses to start (after waiting up to
`lease_wait_s` for it to go), naming the holder; a row whose heartbeat is older than `lease_ttl_s`
(its holder was killed), or held by a process of this host that no longer runs, is taken over. Taking
and renewing compare the row's `version`, so of two processes at once exactly one wins, on SQLite and
PostgreSQL alike. App instances in one process share
the lease (they share its Ray connection too); the last one to stop gives it back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from sqlalchemy import Integer, String, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from embinit.errors import EmbinitError
from embinit.holders import holder_gone, holder_id
from embinit.redact import masked
from service.db import Base, UTCDateTime, utcnow

log = logging.getLogger("embinit.service")
ROW = "state"
_holds: Counter[str] = Counter()   # database URL -> app instances of this process holding its lease
_holds_lock = threading.Lock()


class LeaseRow(Base):
    __tablename__ = "service_lease"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(300))
    version: Mapped[int] = mapped_column(Integer, default=0)
    heartbeat_at = mapped_column(UTCDateTime())
    acquired_at = mapped_column(UTCDateTime())


class LeaseHeld(EmbinitError):
    """Another live API process owns the state database."""


class Lease:
    def __init__(self, sessions, database_url: str, ttl_s: float = 30.0, wait_s: float = 0.0):
        self.sessions, self.url, self.ttl_s, self.wait_s = sessions, database_url, ttl_s, wait_s
        self.me = holder_id()
        self.held = False
        self._stop = threading.Event()

    def acquire(self) -> None:
        """Take the lease or raise `LeaseHeld` naming its holder (after `wait_s`); held already (`embinit
        serve` takes it before the app starts, whose startup takes it again), nothing to do."""
        if self.held:
            return
        deadline = time.monotonic() + self.wait_s
        while True:
            other = self._take()
            if other is None:
                break
            if time.monotonic() >= deadline:
                raise LeaseHeld(self._refusal(other))
            time.sleep(min(1.0, self.ttl_s / 3))
        with _holds_lock:
            _holds[self.url] += 1
        self.held = True
        threading.Thread(target=self._beat, daemon=True, name="embinit-lease").start()
        log.info("state database lease taken by %s", self.me)

    def _refusal(self, other: LeaseRow) -> str:
        age = (utcnow() - other.heartbeat_at).total_seconds()
        return (f"the state database {masked(self.url)} is owned by another embinit API ({other.holder}, "
                f"last heartbeat {age:.0f} s ago); a second API would judge its running experiments. Stop "
                f"it first (its lease lapses {self.ttl_s:g} s after its last heartbeat, EMBINIT_LEASE_TTL_S), "
                f"set EMBINIT_LEASE_WAIT_S to wait for it, or give this API its own EMBINIT_DATABASE_URL")

    def _take(self) -> LeaseRow | None:
        """None when this process now holds the lease, else the row of the live holder."""
        with self.sessions() as s:
            row, now = s.get(LeaseRow, ROW), utcnow()
            if row is None:
                s.add(LeaseRow(name=ROW, holder=self.me, version=0, heartbeat_at=now, acquired_at=now))
                try:
                    s.commit()
                    return None
                except IntegrityError:  # another process inserted it first: read it again
                    s.rollback()
                    return self._take()
            holder, silent_s = row.holder, (now - row.heartbeat_at).total_seconds()
            if holder != self.me and silent_s <= self.ttl_s and not holder_gone(holder):
                return row
            taken = s.execute(update(LeaseRow).where(LeaseRow.name == ROW, LeaseRow.version == row.version)
                              .values(holder=self.me, version=row.version + 1, heartbeat_at=now, acquired_at=now))
            s.commit()
            if taken.rowcount != 1:  # another process changed it meanwhile: look again
                return self._take()
            if holder != self.me:
                log.warning("took over the state database lease from %s (gone; last heartbeat %.0f s ago)", holder,
                            silent_s)
            return None

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                with self.sessions() as s:
                    kept = s.execute(update(LeaseRow).where(LeaseRow.name == ROW, LeaseRow.holder == self.me)
                                     .values(heartbeat_at=utcnow(), version=LeaseRow.version + 1))
                    s.commit()
                if kept.rowcount != 1:
                    self.held = False
                    log.error("lost the state database lease: another API took it over; this one no longer "
                              "judges any experiment")
                    return
            except Exception:  # a database hiccup: try again at the next beat, within the TTL
                log.warning("could not renew the state database lease", exc_info=True)

    def release(self) -> None:
        """Give the lease back (when this is the process's last app instance holding it)."""
        if not self.held:
            return
        self._stop.set()
        self.held = False
        with _holds_lock:
            _holds[self.url] -= 1
            last = _holds[self.url] <= 0
        if last:
            with self.sessions() as s:
                s.query(LeaseRow).filter(LeaseRow.name == ROW, LeaseRow.holder == self.me).delete()
                s.commit()


