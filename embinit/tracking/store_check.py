"""What a tracking URI names, told before MLflow opens it.

MLflow opens whatever it is given: a mistyped scheme (`sqlit:///x.db`) is a KeyError deep in its store
registry, a bare path or `sqlite:/x.db` a file store it refuses with a page of text, and any SQLite file
becomes an MLflow store: the tables are created in it (and the file switched to WAL by
`embinit.tracking.prepare`), next to whatever it held. So every command checks here first, once:

- `resolved(uri)`: the URI's shape (a scheme MLflow stores use, `sqlite:///` then a path), resolved;
- `sqlite_store(path)`: what a SQLite file is, read without writing to it: not there, empty (both fine
  for `embinit run`, which creates the store), an MLflow store at this MLflow's schema or an older one;
  anything else is an EmbinitError naming the file and what it is (not SQLite, damaged, another
  application's tables, a newer MLflow's schema);
- `database_store(uri)`: the same for a database server's store (PostgreSQL, MySQL): empty (a new
  database, to create), current or old; another application's tables, or a server that does not answer,
  is an EmbinitError;
- `require_store(uri)`: what the commands that only read (report, reproduction, `train --from-run`)
  open: an MLflow store that exists, at this MLflow's schema; never created nor migrated.

`embinit.tracking.prepare.prepare_store` (`embinit run`, the API) creates, or upgrades (with a copy kept
of a SQLite file), only what `sqlite_store` or `database_store` accepts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sqlite3
import time
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

from embinit.errors import EmbinitError, did_you_mean
from embinit.redact import masked
from embinit.tracking.mlflow_store import client, resolve_uri

# the schemes of MLflow's own stores: SQL databases (sqlalchemy's `dialect+driver`: a file, or a database
# on a server), tracking servers, Databricks and the (deprecated) file store
SERVER_DATABASES = ("postgresql", "mysql", "mssql")
DATABASES = ("sqlite", *SERVER_DATABASES)
SCHEMES = (*DATABASES, "http", "https", "databricks", "databricks-uc", "uc", "file")
SQLITE_HEADER = b"SQLite format 3\x00"
CORE = {"experiments": "experiment_id", "runs": "run_uuid"}   # a table of MLflow's and a column of it
SHAPES = "sqlite:///PATH (sqlite:////ABSOLUTE/PATH), postgresql://, mysql://, mssql:// or an http(s):// server"


class StoreUnreachable(EmbinitError):
    """A database server's store that does not answer (down, refused, no such database or user)."""


class StoreState(NamedTuple):
    """What a store is: `path` (a SQLite file's, or a database server's URL with its password masked),
    `state` "missing", "empty", "current", "old" (`revision` older than this MLflow's `head`) or, for a
    reader that goes on without it (the dry run), "unreachable" (`problem` says why)."""
    path: Path | str
    state: str
    revision: str | None = None
    head: str | None = None
    problem: str | None = None

    @property
    def on_server(self) -> bool:
        """Whether this is a database server's store (`path` its masked URL), not a SQLite file."""
        return is_server_database(str(self.path))


def uri_problem(uri: str) -> str | None:
    """What is wrong with the shape of a tracking URI as given (before `resolve_uri`), or None."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", uri)
    if scheme is None or (len(scheme.group(1)) == 1 and "://" not in uri):   # a path (C:\ too)
        absolute = Path(uri).expanduser().resolve()
        return (f"{uri!r} is a path, not a tracking URI (MLflow would read it as a folder of runs); for a "
                f"SQLite store give sqlite:///{absolute}")
    name = scheme.group(1).lower().split("+", 1)[0]
    if name not in SCHEMES:
        return (f"unknown scheme {name!r} in the tracking URI {masked(uri)}: a store is {SHAPES}"
                f"{did_you_mean(name, SCHEMES)}")
    if name == "sqlite" and not uri.startswith("sqlite:///"):
        rest = uri[len(scheme.group(0)):]
        rest = rest[2:] if rest.startswith("//") else rest   # sqlite://x.db: x.db read as a host
        hint = f"; did you mean sqlite:///{rest}?" if rest else ""
        return (f"{uri!r} is not a SQLite URI: that is sqlite:/// then the file's path (sqlite:///mlflow.db "
                f"relative, sqlite:////ABSOLUTE/PATH.db absolute){hint}")
    if "://" not in uri:
        return f"{masked(uri)} is not a URI ({scheme.group(0)}// and a location); a store is {SHAPES}"
    return None


def resolved(uri: str | None) -> str:
    """`uri` (None: the default store) resolved by `mlflow_store.resolve_uri`, once its shape is
    checked: an EmbinitError saying what is wrong with it otherwise."""
    problem = uri_problem(uri) if uri else None
    if problem:
        raise EmbinitError(problem)
    return resolve_uri(uri)


def sqlite_path(uri: str) -> Path | None:
    """The file of a resolved `sqlite:///` URI (None: another scheme, or an in-memory database)."""
    if not uri.startswith("sqlite:///") or ":memory:" in uri:
        return None
    return Path(uri[len("sqlite:///"):].split("?", 1)[0])


def sqlite_store(path: Path) -> StoreState:
    """What the SQLite file at `path` is as an MLflow store, read (never written); an EmbinitError when
    it is no MLflow store that `embinit run` may create, use or upgrade."""
    if not path.exists():
        return StoreState(path, "missing")
    if path.is_dir():
        raise EmbinitError(f"{path} is a folder, not an SQLite database; give a file (sqlite:///PATH/mlflow.db)")
    head = _header(path)
    if not head:
        return StoreState(path, "empty")
    if not head.startswith(SQLITE_HEADER):
        raise EmbinitError(f"{path} is not an SQLite database (it does not start with SQLite's header); "
                           f"give a new file or an MLflow store")
    if (short := _truncated(path, head)) is not None:
        raise EmbinitError(f"{path} is a damaged SQLite database: {short}; restore it from a copy, or give a "
                           f"new file or an MLflow store")
    try:
        tables, columns, revision = _read_schema(path)
    except sqlite3.Error as e:
        raise EmbinitError(_unreadable(path, head, e)) from None
    if not tables:
        return StoreState(path, "empty")
    return _as_store(path, tables, columns, revision)


def _unreadable(path: Path, head: bytes, e: sqlite3.Error) -> str:
    """Why SQLite could not read the file: a store in WAL mode (as embinit makes them, header bytes 18-19)
    on a read-only disk or in a folder this process may not write, where SQLite cannot make the -shm file
    it reads one through ("unable to open database file"): that store is not damaged; else a damaged file."""
    locked = [str(p) for p in (path, path.parent) if not os.access(p, os.W_OK)]
    if head[18:20] == b"\x02\x02" and locked:
        return (f"{path} cannot be opened ({e}): {' and '.join(locked)} cannot be written here (read-only), and "
                f"SQLite reads a store in WAL mode, as embinit makes them, only where it can write its -shm and "
                f"-wal files beside it; make it writable, or copy the store (with its -wal file) to a writable disk")
    return (f"{path} cannot be read as an SQLite database ({e}: a damaged or truncated file?); restore it from a "
            f"copy, or give a new file or an MLflow store")


# what SQLite says of a file whose pages past the schema are damaged: `sqlite_store` reads the schema
# alone, so a command meets them only when its query reaches them
DAMAGE = ("database disk image is malformed", "file is not a database")


def damage_found(e: BaseException) -> str | None:
    """SQLite's words for a damaged store in `e` or an error it wraps (MLflow and SQLAlchemy wrap
    sqlite3's), or None: `e` is no such error."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, sqlite3.DatabaseError) or type(e).__module__.startswith(("sqlalchemy", "mlflow")):
            words = next((d for d in DAMAGE if d in str(e)), None)
            if words is not None:
                return words
        e = e.__cause__ or e.__context__
    return None


def damaged_message(uri: str | None, words: str) -> str:
    """What to say of the store at `uri` (None: the one the command read, its default or the spec's) that
    SQLite found damaged (`words`) while reading it."""
    path = sqlite_path(resolve_uri(uri)) if uri and not uri_problem(uri) else None
    where = str(path) if path else "the MLflow store this command read (--tracking-uri, the spec's or ./mlflow.db)"
    check = f"sqlite3 {path}" if path else "sqlite3 PATH"
    return (f"{where} is a damaged SQLite database: SQLite found \"{words}\" reading its runs; restore it from a "
            f"copy (`{check} \"PRAGMA integrity_check\"` lists the damage, `{check} .recover` saves what it can)")


def _as_store(path, tables: list[str], columns: dict[str, set], revision: str | None,
              fresh: str = "file") -> StoreState:
    """The store the schema read from `path` (a SQLite file, or a database's masked URL) is, or the
    EmbinitError saying why it is none; `fresh` names what to give instead ("file", "database")."""
    missing = [(t, c) for t, c in CORE.items() if c not in columns.get(t, set())]
    if missing and all(t in columns for t in CORE):   # MLflow's table names, another application's tables
        names, cols = ", ".join(t for t, _ in missing), ", ".join(f"{t}.{c}" for t, c in missing)
        raise EmbinitError(f"{path} is not an MLflow store: its table{'s' if len(missing) > 1 else ''} {names} "
                           f"{'are' if len(missing) > 1 else 'is'} not MLflow's (no column {cols}); give a new "
                           f"{fresh} or an MLflow store")
    if missing or revision is None:
        raise EmbinitError(f"{path} is not an MLflow store: it has tables {_listed(tables)}; give a new {fresh} or "
                           f"an MLflow store")
    known, head = _revisions()
    if revision not in known:
        import mlflow
        raise EmbinitError(f"{path} has MLflow schema revision {revision}, which the installed MLflow "
                           f"{mlflow.__version__} does not know (written by a newer MLflow?); upgrade mlflow "
                           f"(pip install -U mlflow) to use it")
    return StoreState(path, "current" if revision == head else "old", revision, head)


def _listed(tables: list[str], most: int = 12) -> str:
    shown = ", ".join(tables[:most])
    return f"[{shown}, ... ({len(tables)} in all)]" if len(tables) > most else f"[{shown}]"


def _header(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(100)
    except OSError as e:
        raise EmbinitError(f"cannot read {path}: {e.strerror}") from None


def _truncated(path: Path, head: bytes) -> str | None:
    """Why the file is shorter than its header says, or None, seen twice: a writer (or a checkpoint)
    that grows a live store writes its first page before the pages that extend the file."""
    if _short(path, head) is None:
        return None
    time.sleep(0.2)
    return _short(path, _header(path))


def _short(path: Path, head: bytes) -> str | None:
    """The header's page count is valid when its version-valid-for number equals the change counter
    (SQLite's file format, section 1.3)."""
    if len(head) < 100:
        return f"{len(head)} bytes, shorter than SQLite's 100-byte header"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages, valid = int.from_bytes(head[28:32], "big"), head[92:96] == head[24:28]
    size = path.stat().st_size
    if valid and pages and size < pages * page and not _log_holds_pages(path, page):
        return f"truncated ({size} bytes of the {pages * page} its header gives)"
    return None


def _log_holds_pages(path: Path, page: int) -> bool:
    """Whether a write-ahead log beside the file holds pages of it: then the file may be shorter than its
    header says, its last pages in the log, where SQLite reads them (a checkpoint cut short by a full disk
    leaves it so); whether they are all there is SQLite's to tell, reading the schema."""
    try:
        with open(f"{path}-wal", "rb") as f:
            head = f.read(32)
            size = f.seek(0, 2)
    except OSError:
        return False
    magic, log_page = int.from_bytes(head[:4], "big"), int.from_bytes(head[8:12], "big")
    # the log's header: its magic number, and the database's page size (section 4.1 of the file format)
    return len(head) == 32 and magic in (0x377F0682, 0x377F0683) and log_page == page and size >= 32 + 24 + page


def _read_schema(path: Path) -> tuple[list[str], dict[str, set], str | None]:
    """(tables, {MLflow's core table: its columns}, alembic revision or None), read with writes refused.
    Not opened `mode=ro`: a read-only connection to a WAL database leaves its -wal and -shm files behind,
    where the last connection to close otherwise removes them; a file we may not write opens read-only."""
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True)
    try:
        conn.execute("PRAGMA query_only = ON")
        tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                   "AND name NOT LIKE 'sqlite_%'"))
        columns = {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in CORE if t in tables}
        revision = None
        if "alembic_version" in tables:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            revision = row[0] if row else None
        return tables, columns, revision
    finally:
        conn.close()


def database_store(uri: str, timeout_s: int = 10) -> StoreState:
    """`sqlite_store` for a database server's store (`postgresql://`, `mysql://`, `mssql://`; `uri`
    resolved): "empty" (no tables: `embinit run` creates the store), "current" or "old"; another
    application's database is an EmbinitError naming its tables, as is a database that cannot be reached.
    Read with a connect timeout and never written: MLflow would make its tables in whatever database it
    is given, beside those already there (the API's state database has an `experiments` table too)."""
    where = masked(uri)
    try:
        tables, columns, revision = _read_database_schema(uri, timeout_s)
    except Exception as e:   # unreachable, refused, no such database
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise StoreUnreachable(f"cannot read the MLflow store {where}: {type(e).__name__}: {first}") from None
    if not tables:
        return StoreState(where, "empty")
    return _as_store(where, tables, columns, revision, fresh="database")


@contextlib.contextmanager
def quick_connection(uri: str, timeout_s: int):
    """One connection to the database at `uri`, no pool, given up after `timeout_s` seconds of
    connecting (MLflow's own store retries an unreachable database for most of an hour)."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    args = {"timeout": timeout_s} if uri.startswith(("sqlite:", "mssql")) else {"connect_timeout": timeout_s}
    engine = sqlalchemy.create_engine(uri, poolclass=NullPool, connect_args=args)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _read_database_schema(uri: str, timeout_s: int) -> tuple[list[str], dict[str, set], str | None]:
    """(tables of the default schema, {MLflow's core table: its columns}, alembic revision or None)."""
    import sqlalchemy

    with quick_connection(uri, timeout_s) as conn:
        found = sqlalchemy.inspect(conn)
        tables = sorted(found.get_table_names())
        columns = {t: {c["name"] for c in found.get_columns(t)} for t in CORE if t in tables}
        revision = None
        if "alembic_version" in tables:
            revision = conn.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).scalar()
    return tables, columns, revision


@functools.cache
def _revisions() -> tuple[frozenset, str]:
    """(every schema revision the installed MLflow knows, the newest)."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db import utils

    script = ScriptDirectory.from_config(utils._get_alembic_config(""))
    return frozenset(r.revision for r in script.walk_revisions()), utils._get_latest_schema_revision()


def out_of_date(store: StoreState) -> str:
    """The message for a store at an older schema than this MLflow's, with how to upgrade it (the copy
    with SQLite's `.backup`: `cp` misses the commits still in a WAL store's -wal file)."""
    import mlflow
    told = (f"the MLflow store {store.path} has an out-of-date schema (revision {store.revision}; MLflow "
            f"{mlflow.__version__} reads {store.head})")
    if store.on_server:   # backed up with that server's own tools
        return (f"{told}; back the database up and upgrade it with `mlflow db upgrade DATABASE_URL`, or let "
                f"`embinit run` with this store upgrade it (no copy is kept of a database server's store)")
    return (f"{told}; back it up (sqlite3 {store.path} \".backup {store.path}.bak\") "
            f"and upgrade it with `mlflow db upgrade sqlite:///{store.path}`, or let `embinit run` with this store "
            f"upgrade it (it keeps a copy)")


def _scheme(uri: str) -> str:
    """The dialect of a URI's scheme (`postgresql+psycopg://` -> postgresql), as given."""
    return uri.split(":", 1)[0].split("+", 1)[0]


def is_database(uri: str) -> bool:
    """Whether MLflow keeps the store of a resolved tracking URI in a SQL database: a SQLite file or a
    database on a server (an `http://` tracking server migrates its own)."""
    return _scheme(uri) in DATABASES


def is_server_database(uri: str) -> bool:
    """Whether a resolved tracking URI names a database on a server (PostgreSQL, MySQL, SQL Server): a
    database, not SQLite."""
    return _scheme(uri) in SERVER_DATABASES


def require_store(uri: str | None = None):
    """For commands that only read: a client of the MLflow store at `uri` (None: the default), which
    exists and is at this MLflow's schema; else an EmbinitError saying what it is. A SQLite store that is
    not there is an error naming its path, not an empty new database created where the command was run
    (a typo in --tracking-uri, or another working directory than the sweep's). Nothing is created or
    migrated."""
    where = resolved(uri)
    path = sqlite_path(where)
    if path is not None:
        store = sqlite_store(path)
        if store.state in ("missing", "empty"):
            what = "no MLflow store" if store.state == "missing" else "no MLflow store (an empty file)"
            raise EmbinitError(f"{what} at {path} ({'--tracking-uri' if uri else 'the default, ./mlflow.db'})"
                               f"; give --tracking-uri sqlite:////ABSOLUTE/PATH/mlflow.db of the store the sweep "
                               f"wrote (`embinit run` prints it)")
        if store.state == "old":
            raise EmbinitError(out_of_date(store))
    elif is_server_database(where):
        store = database_store(where)
        if store.state == "empty":
            raise EmbinitError(f"no MLflow store in the database {store.path} (it has no tables); give the "
                               f"--tracking-uri of the store the sweep wrote (`embinit run` prints it)")
        if store.state == "old":
            raise EmbinitError(out_of_date(store))
    try:
        return client(where)
    except Exception as e:  # a URI MLflow refuses (a file store, a database it cannot reach)
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise EmbinitError(f"cannot open the MLflow store {masked(where)}: {first}") from None
