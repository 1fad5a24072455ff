"""The service's own state: one row per submitted experiment, through SQLAlchemy.

SQLite file by default, PostgreSQL (or anything SQLAlchemy speaks) by URL. The row is the API's view of
an experiment; the truth about a running one lives in Ray and MLflow and is copied here on read
(`service.state`), so a restarted API shows what happened while it was away.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, DateTime, Integer, String, Text, TypeDecorator, create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
ACTIVE = ("queued", "running")
TERMINAL = ("succeeded", "failed", "cancelled")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class UTCDateTime(TypeDecorator):
    """A timezone-aware UTC datetime on every backend (SQLite drops the zone; we put it back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value


class Base(DeclarativeBase):
    pass


class Experiment(Base):
    __tablename__ = "experiments"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    spec_hash: Mapped[str] = mapped_column(String(64), index=True)
    trial_keys: Mapped[list[str]] = mapped_column(JSON, default=list)
    n_trials: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), index=True, default="queued")
    # Trials by state: pending, running, finished, failed (and reused: finished before this run).
    counts: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The Ray actor that drives this experiment (a detached named actor), and where it logs.
    driver: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # The Ray cluster the driver runs in (`RayRunner.cluster_id()`): a reconciler judges only drivers of its own
    # cluster, or of a local cluster whose API process is gone (service.state).
    ray_cluster: Mapped[str | None] = mapped_column(String(300), nullable=True)
    tracking_uri: Mapped[str] = mapped_column(String(1000))
    mlflow_experiment: Mapped[str] = mapped_column(String(500))
    mlflow_experiment_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    cancel_requested_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # Rendered results of a finished experiment ({"json": ..., "markdown": ..., "csv": ...}), so reads
    # of finished experiments never rebuild the report.
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL and a busy timeout so reads never wait on a writer."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:
            cur = dbapi_conn.cursor()
            if ":memory:" not in url:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()
    else:
        engine = create_engine(url, pool_pre_ping=True)
    Base.metadata.create_all(engine)
    _add_new_columns(engine)
    return engine


def _add_new_columns(engine: Engine) -> None:
    """Columns added to `experiments` since a database was created (all nullable), added in place."""
    from sqlalchemy import inspect, text

    have = {c["name"] for c in inspect(engine).get_columns(Experiment.__tablename__)}
    with engine.begin() as conn:
        for column in Experiment.__table__.columns:
            if column.name not in have and column.nullable:
                kind = column.type.compile(dialect=engine.dialect)
                conn.execute(text(f"ALTER TABLE {Experiment.__tablename__} ADD COLUMN {column.name} {kind}"))


def make_sessionmaker(url: str) -> sessionmaker:
    return sessionmaker(make_engine(url), expire_on_commit=False)
