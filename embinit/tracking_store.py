"""Creating or upgrading a database-backed MLflow store once, before anything else opens it.

MLflow's SQL store runs its migrations in whichever process opens a new database first, without a lock
(`SqlAlchemyStore.__init__`). Two processes opening a fresh `mlflow.db` at once (the service's driver
and its first read; two `embinit run`s) both run them: one fails ("duplicate column name: step") and the
store can be left half-migrated, so that every later read fails. `prepare_store` runs them under a lock
held across processes (a `flock` beside a SQLite file, an advisory lock on PostgreSQL), so they run once;
the API calls it at startup, before it accepts work, and `run_sweep` before its driver starts anything.

It also gives the store one index of embinit's own (`index_trial_keys`): every trial's worker looks its
key up by the `embinit.trial_key` tag, and MLflow's schema indexes tags by (key, run) only, so that search
read every key of the experiment (~1 ms more per 1,000 runs). A partial index on the tag's value, for
that key only, makes it a lookup (bench/bench_trial_writes.py). Behind a tracking server the server
creates and migrates the store; the API adds the index through the database it reads
(`EMBINIT_TRACKING_READ_URI`) once the server has made the tables.
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
from embinit.records import KEY_TAG

log = logging.getLogger("embinit.tracking")
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
TRIAL_KEY_INDEX = "embinit_trial_key_tags"


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
            _trial_key_index(engine)
            return done
    except EmbinitError:
        raise
    except Exception as e:
        raise EmbinitError(f"the MLflow store {engine.url} could not be created or upgraded: "
                           f"{type(e).__name__}: {str(e).splitlines()[0]}") from e
    finally:
        engine.dispose()


def index_trial_keys(uri: str) -> bool:
    """Add the trial-key index to a store something else created (the database behind a tracking
    server), if its tables exist; never creates or migrates tables. Returns whether the index is there.
    A store that cannot be reached or indexed is logged and left as it is: searches stay correct, only
    slower."""
    uri = resolve_uri(uri)
    if not is_database(uri):
        return False
    import sqlalchemy
    from mlflow.store.db import utils

    engine = sqlalchemy.create_engine(uri)
    try:
        if not utils._all_tables_exist(engine):
            return False
        with _init_lock(uri, engine):
            return _trial_key_index(engine)
    except Exception as e:
        log.warning("could not index the trial keys of %s: %s: %s", engine.url, type(e).__name__,
                    str(e).splitlines()[0] if str(e) else "")
        return False
    finally:
        engine.dispose()


def _trial_key_index(engine) -> bool:
    """The partial index on `tags.value` for the key `embinit.trial_key` (SQLite, PostgreSQL; other
    databases have no partial indexes and keep MLflow's schema as it is)."""
    import sqlalchemy

    if engine.dialect.name not in ("sqlite", "postgresql"):
        return False
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text(f"CREATE INDEX IF NOT EXISTS {TRIAL_KEY_INDEX} ON tags (value) "
                                     f"WHERE key = '{KEY_TAG}'"))
    return True


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
