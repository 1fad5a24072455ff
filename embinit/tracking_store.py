"""Creating or upgrading a database-backed MLflow store once, before anything else opens it.

MLflow's SQL store runs its migrations in whichever process opens a new database first, without a lock
(`SqlAlchemyStore.__init__`). Two processes opening a fresh `mlflow.db` at once (the service's driver
and its first read; two `embinit run`s) both run them: one fails ("duplicate column name: step") and the
store can be left half-migrated, so that every later read fails. `prepare_store` runs them under a lock
held across processes (a `flock` beside a SQLite file, an advisory lock on PostgreSQL), so they run once;
the API calls it at startup, before it accepts work, and `run_sweep` before its driver starts anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
from pathlib import Path

from embinit.content_hash import file_lock
from embinit.errors import EmbinitError
from embinit.mlflow_store import resolve_uri

log = logging.getLogger("embinit.tracking")
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


def is_database(uri: str) -> bool:
    """Whether MLflow keeps this store in a SQL database (an `http://` server migrates its own)."""
    return uri.split(":", 1)[0].split("+", 1)[0] in DATABASE_SCHEMES


def _sqlite_path(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///") or ":memory:" in uri:
        return None
    return Path(uri[len("sqlite:///"):])


@contextlib.contextmanager
def _init_lock(uri: str, engine):
    """Held by one process at a time per store: beside a SQLite file, in PostgreSQL itself, else on
    this host."""
    db = _sqlite_path(uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(db.with_name(db.name + ".init-lock")):
            yield
    elif engine.dialect.name == "postgresql":
        import sqlalchemy

        key = int(hashlib.sha256(b"embinit-mlflow-init").hexdigest()[:15], 16)
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
    else:
        digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
        with file_lock(Path(tempfile.gettempdir()) / f"embinit-mlflow-init-{digest}.lock"):
            yield


def prepare_store(uri: str | None = None) -> str:
    """Create the MLflow store at `uri` or bring its schema to the installed MLflow's version, once.
    Returns what was done: "created", "upgraded", "current", or "external" (not a database)."""
    uri = resolve_uri(uri)
    if not is_database(uri):
        return "external"
    import sqlalchemy
    from mlflow.store.db import utils

    engine = sqlalchemy.create_engine(uri)
    try:
        with _init_lock(uri, engine):
            done = _create_or_upgrade(engine, utils)
            if engine.dialect.name == "sqlite":
                _write_ahead_log(engine)
            return done
    except EmbinitError:
        raise
    except Exception as e:
        raise EmbinitError(f"the MLflow store {engine.url} could not be created or upgraded: "
                           f"{type(e).__name__}: {str(e).splitlines()[0]}") from e
    finally:
        engine.dispose()


def _write_ahead_log(engine) -> None:
    """Put a SQLite store in write-ahead-log mode (kept in the file, for every process that opens it):
    readers (the API's `/trials`, a report, the MLflow UI) then never block the trials' writes, nor
    they the readers; the rollback journal SQLite starts with makes each commit wait for every reader.
    WAL needs the store on a local disk, which a SQLite store shared by a sweep's workers is already."""
    import sqlalchemy

    with engine.connect() as conn:
        mode = conn.execute(sqlalchemy.text("PRAGMA journal_mode=WAL")).scalar()
    if str(mode).lower() != "wal":
        log.warning("the MLflow store %s stays in journal mode %s (WAL refused)", engine.url, mode)


def _create_or_upgrade(engine, utils) -> str:
    if not utils._all_tables_exist(engine):
        log.info("creating the MLflow store %s", engine.url)
        utils._initialize_tables(engine)
        return "created"
    current, head = utils._get_schema_version(engine), utils._get_latest_schema_revision()
    if current == head:
        return "current"
    log.warning("upgrading the MLflow store %s from schema %s to %s", engine.url, current, head)
    utils._upgrade_db(engine)
    return "upgraded"
