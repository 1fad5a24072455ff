"""Creating or upgrading a database-backed MLflow store once, before anything else opens it.

MLflow's SQL store runs its migrations in whichever process opens a new database first, without a lock
(`SqlAlchemyStore.__init__`). Two processes opening a fresh `mlflow.db` at once (the service's driver
and its first read; two `embinit run`s) both run them: one fails ("duplicate column name: step") and the
store can be left half-migrated, so that every later read fails. `prepare_store` runs them under a lock
held across processes (a `flock` beside a SQLite file, an advisory lock on PostgreSQL), so they run once;
the API calls it at startup, before it accepts work, and `run_sweep` before its driver starts anything.
It creates a SQLite store only in a new or empty file and upgrades only an MLflow store
(`embinit.tracking.store_check.sqlite_store`: any other file is refused as it is), keeping a copy of an upgraded
one beside it (`<name>.bak-<old revision>`). On a database server (PostgreSQL, MySQL) it creates the store
only in a database without tables (`embinit.tracking.store_check.database_store`: another application's database
is refused as it is).

It also gives the store one index of embinit's own (`index_trial_keys`): every trial's worker looks its
key up by the `embinit.trial_key` tag, and MLflow's schema indexes tags by (key, run) only, so that search
read every key of the experiment (~1 ms more per 1,000 runs). A partial index on the tag's value, for
that key only, makes it a lookup (bench/bench_trial_writes.py). Behind a tracking server the server
creates and migrates the store; the API adds the index through the database it reads
(`EMBINIT_TRACKING_READ_URI`) once the server has made the tables.

A sweep whose trials write their runs to the database behind a tracking server checks first that it is
that server's store (`check_store_behind`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
import tempfile
from pathlib import Path
from urllib.parse import quote

from embinit.content_hash import file_lock
from embinit.errors import EmbinitError
from embinit.file_inputs import folder_problem
from embinit.redact import masked
from embinit.tracking.mlflow_store import resolve_uri
from embinit.tracking.records import KEY_TAG
from embinit.tracking.store_check import (database_store, is_database, is_server_database, quick_connection, resolved,
                                          sqlite_path, sqlite_store)

log = logging.getLogger("embinit.tracking")
TRIAL_KEY_INDEX = "embinit_trial_key_tags"


@contextlib.contextmanager
def _init_lock(uri: str, engine):
    """Held by one process at a time per store: beside a SQLite file, in PostgreSQL itself, else on
    this host."""
    db = sqlite_path(uri)
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
    Returns what was done: "created", "upgraded", "current", or "external" (not a database). A URI of
    no store's shape, or a SQLite file that is no MLflow store, is an EmbinitError and left as it is."""
    uri = resolved(uri)
    if not is_database(uri):
        return "external"
    if (db := sqlite_path(uri)) is not None:
        sqlite_store(db)   # refused before anything (the lock file) is made beside it
        if (problem := folder_problem(db.parent, str(db.parent))) is not None:   # was "FileExistsError: ..."
            raise EmbinitError(f"the MLflow store {db} cannot be made: {problem}")
    elif is_server_database(uri):
        database_store(uri)   # another application's database is refused before MLflow makes tables in it
    import sqlalchemy
    from mlflow.store.db import utils

    engine = sqlalchemy.create_engine(uri)
    try:
        with _init_lock(uri, engine):
            done = _create_or_upgrade(engine, utils, db)
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


def _create_or_upgrade(engine, utils, db: Path | None) -> str:
    """Create, upgrade or leave the store; `db`: its SQLite file, checked again under the lock (another
    process may have made it since) and copied before an upgrade."""
    if db is not None and sqlite_store(db).state in ("missing", "empty"):
        log.info("creating the MLflow store %s", engine.url)
        utils._initialize_tables(engine)
        return "created"
    tables = utils._all_tables_exist(engine)
    current, head = utils._get_schema_version(engine), utils._get_latest_schema_revision()
    if current is None and not tables:   # a new database of a server (PostgreSQL, MySQL)
        log.info("creating the MLflow store %s", engine.url)
        utils._initialize_tables(engine)
        return "created"
    if current == head and tables:
        return "current"
    kept = f"; the store as it was is kept at {_backup(db, current)}" if db is not None else ""
    log.warning("upgrading the MLflow store %s from schema %s to %s%s", engine.url, current, head, kept)
    if tables:
        utils._upgrade_db(engine)
    else:   # a store from before MLflow's newest tables: they are created, then it is upgraded
        utils._initialize_tables(engine)
    return "upgraded"


def _backup(db: Path, revision: str | None) -> Path:
    """A copy of the SQLite store `db` (with what its write-ahead log holds) beside it, as
    `<name>.bak-<revision>`, before an upgrade that cannot be undone; an earlier copy is never replaced."""
    target, n = db.with_name(f"{db.name}.bak-{revision}"), 1
    while target.exists():
        n += 1
        target = db.with_name(f"{db.name}.bak-{revision}-{n}")
    src, dst = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return target


def check_store_behind(server_uri: str, store_uri: str, name: str, exp_id: str, timeout_s: int = 10) -> str:
    """`store_uri` (resolved) when it is the database behind the tracking server `server_uri`: a SQL
    database that holds experiment `name` under the id the server gave it, `exp_id`. Else an EmbinitError
    naming every problem, before any trial writes to the wrong store. Read with plain SQL and a connect
    timeout: MLflow's own store retries an unreachable database for most of an hour, and creates (and
    migrates) a SQLite file that is not there."""
    store_uri = resolve_uri(store_uri)
    problems = _shape_problems(server_uri, store_uri)
    if not problems:
        try:
            there = _experiment_id(store_uri, name, timeout_s)
        except Exception as e:  # unreachable, wrong credentials, no MLflow tables
            first = str(e).splitlines()[0][:300] if str(e) else ""
            problems.append(f"{masked(store_uri)} cannot be read as an MLflow store: {type(e).__name__}: {first}")
        else:
            if there != str(exp_id):
                problems.append(f"{masked(store_uri)} is not the store behind {masked(server_uri)}: the server has "
                                f"experiment {name!r} as id {exp_id}, the database "
                                + ("does not have it" if there is None else f"as id {there}"))
    _raise(problems)
    return store_uri


def check_store_shape(server_uri: str, store_uri: str) -> None:
    """What `check_store_behind` can tell without reading anything: the tracking URI is a server and the
    store a SQL database that exists. Run before the tracking store is opened (or created)."""
    _raise(_shape_problems(server_uri, resolve_uri(store_uri)))


def _raise(problems: list[str]) -> None:
    if problems:
        raise EmbinitError("the database the trials were to write their runs to (the database behind the tracking "
                           "server: `embinit run --store-uri`, or the service's EMBINIT_TRACKING_WRITE_DIRECT) "
                           "cannot be used: " + "; ".join(problems))


def _shape_problems(server_uri: str, store_uri: str) -> list[str]:
    problems = []
    if not server_uri.startswith(("http://", "https://")):
        problems.append(f"the tracking URI {masked(server_uri)} is not an `mlflow server` (http:// or "
                        "https://): the trials write to it directly already")
    if not is_database(store_uri):
        problems.append(f"{masked(store_uri)} is not a SQL database URL (postgresql+psycopg://, mysql://, "
                        "sqlite:///)")
    elif (path := sqlite_path(store_uri)) is not None and not path.is_file():
        problems.append(f"{masked(store_uri)}: there is no file {path}")
    elif path is not None:
        try:
            sqlite_store(path)   # another application's database, or no database at all
        except EmbinitError as e:
            problems.append(str(e))
    return problems


def _experiment_id(uri: str, name: str, timeout_s: int) -> str | None:
    import sqlalchemy

    with quick_connection(uri, timeout_s) as conn:
        row = conn.execute(sqlalchemy.text("SELECT experiment_id FROM experiments WHERE name = :name"),
                           {"name": name}).first()
    return None if row is None else str(row[0])
