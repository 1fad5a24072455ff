"""`embinit.tracking.store_check`: a tracking URI's shape and what a SQLite file is as an MLflow store, told before
MLflow opens it (MLflow would make any SQLite file an MLflow store), without writing to the file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embinit.errors import EmbinitError
from embinit.tracking.store_check import require_store, resolved, sqlite_store, uri_problem
from embinit.tracking.prepare import prepare_store
from helpers.bad_stores import checkpoint_cut_short, notes_db, random_bytes, snapshot, stamped_old, state_db, truncated


@pytest.mark.parametrize("uri, message", [
    ("sqlit:///x.db", "unknown scheme 'sqlit' in the tracking URI sqlit:///x.db: a store is sqlite:///PATH"),
    ("sqlit:///x.db", "; did you mean 'sqlite'?"),
    ("sqlite:/tmp/x.db", "'sqlite:/tmp/x.db' is not a SQLite URI: that is sqlite:/// then the file's path"),
    ("sqlite:/tmp/x.db", "did you mean sqlite:////tmp/x.db?"),
    ("sqlite://x.db", "did you mean sqlite:///x.db?"),
    ("/tmp/x.db", "'/tmp/x.db' is a path, not a tracking URI (MLflow would read it as a folder of runs); for a "
                  "SQLite store give sqlite:////tmp/x.db"),
    ("postgresql:db", "postgresql:db is not a URI"),
])
def test_a_uri_of_no_stores_shape_says_what_is_wrong(uri, message):
    assert message in uri_problem(uri)
    with pytest.raises(EmbinitError, match="tracking URI|not a SQLite URI|is a path|is not a URI"):
        resolved(uri)


@pytest.mark.parametrize("uri", ["sqlite:///mlflow.db", "sqlite:////abs/mlflow.db", "http://127.0.0.1:5000",
                                 "https://mlflow.example", "postgresql+psycopg://u:p@db:5432/mlflow",
                                 "mysql://h/db", "file:///tmp/mlruns"])
def test_the_shapes_of_mlflows_stores_pass(uri):
    assert uri_problem(uri) is None


def test_a_new_or_empty_file_is_a_store_to_create(tmp_path):
    assert sqlite_store(tmp_path / "absent.db").state == "missing"
    (tmp_path / "empty.db").write_bytes(b"")
    assert sqlite_store(tmp_path / "empty.db").state == "empty"
    assert not (tmp_path / "absent.db").exists() and (tmp_path / "empty.db").read_bytes() == b""


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    prepare_store(f"sqlite:///{db}")
    return db


def test_an_mlflow_store_is_told_by_its_schema_revision(real, tmp_path):
    assert sqlite_store(real).state == "current"
    old, revision = stamped_old(real, tmp_path / "old.db")
    store = sqlite_store(old)
    assert (store.state, store.revision) == ("old", revision) and store.head != revision


@pytest.mark.parametrize("make, message", [
    (notes_db, r"notes\.db is not an MLflow store: it has tables \[notes\]; give a new file or an MLflow store$"),
    (state_db, r"state\.db is not an MLflow store: it has tables \[experiments[^]]*\]; give a new file or an MLflow "
               r"store$"),
    ("half", r"half\.db is not an MLflow store: its table experiments is not MLflow's \(no column "
             r"experiments\.experiment_id\); give a new file or an MLflow store$"),
    (random_bytes, r"random\.db is not an SQLite database \(it does not start with SQLite's header\); give a new "
                   r"file or an MLflow store"),
    ("truncated", r"truncated\.db is a damaged SQLite database: truncated \(\d+ bytes of the \d+ its header "
                  r"gives\); restore it from a copy"),
])
def test_a_file_that_is_no_mlflow_store_is_named_and_left_as_it_is(make, message, real, tmp_path):
    name = {notes_db: "notes.db", state_db: "state.db", random_bytes: "random.db"}.get(make, f"{make}.db")
    db = {"truncated": lambda p: truncated(real, p), "half": half_converted}.get(make, make)(tmp_path / name)
    before = snapshot(db)
    with pytest.raises(EmbinitError, match=message):
        sqlite_store(db)
    assert snapshot(db) == before


def test_a_store_whose_log_holds_the_pages_a_full_disk_kept_from_the_file_is_no_damaged_store(real, tmp_path):
    """A sweep on a full disk left its store's main file shorter than its header says, the pages it lacks in
    the write-ahead log beside it (a checkpoint cut short); SQLite reads them there. It was refused as "a
    damaged SQLite database: truncated ...; restore it from a copy", so the rerun that closes the dead
    sweep's runs and resumes it could not start, and the advice was to replace a healthy store."""
    db = checkpoint_cut_short(real, tmp_path / "cut.db")
    header_size = int.from_bytes(db.read_bytes()[28:32], "big") * int.from_bytes(db.read_bytes()[16:18], "big")
    assert db.stat().st_size < header_size   # what the size check saw
    assert sqlite_store(db).state == "current"
    import sqlite3
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_a_truncated_store_beside_a_log_that_is_no_sqlite_log_is_still_refused(real, tmp_path):
    db = truncated(real, tmp_path / "cut.db")
    Path(f"{db}-wal").write_bytes(b"not a log" * 100)
    with pytest.raises(EmbinitError, match="is a damaged SQLite database: truncated"):
        sqlite_store(db)


def _check_read_only(folder: Path) -> str:
    """What `sqlite_store` says of `folder`/mlflow.db where the folder cannot be written: made so by its
    permissions, or, for root (whom they do not stop), by a read-only bind mount in a mount namespace of
    its own (skipped where none can be made)."""
    code = ("import sys\nfrom pathlib import Path\nfrom embinit.tracking.store_check import sqlite_store\n"
            "try:\n    sqlite_store(Path(sys.argv[1]))\nexcept Exception as e:\n    print(e)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run([sys.executable, "-c", code, str(folder / "mlflow.db")], env=env,
                                  capture_output=True, text=True, timeout=120).stdout
        finally:
            folder.chmod(0o755)
    if shutil.which("unshare") is None:
        pytest.skip("no unshare to make a read-only mount")
    script = (f'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && exec "{sys.executable}" -c "$2" '
              f'"$1/mlflow.db"')
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(folder), code], env=env,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.skip(f"no read-only mount here: {done.stderr.strip()[:200]}")
    return done.stdout


def test_a_store_on_a_read_only_disk_is_said_read_only_not_damaged(real, tmp_path):
    """A WAL store (as embinit makes them) on a read-only disk or in a folder this user may not write:
    SQLite cannot make its -shm file and says "unable to open database file". It was called "a damaged or
    truncated file?; restore it from a copy", the advice to replace a healthy store."""
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(real, folder / "mlflow.db")
    assert (folder / "mlflow.db").read_bytes()[18:20] == b"\x02\x02"   # WAL mode
    said = _check_read_only(folder)
    assert "cannot be written here (read-only)" in said and "WAL mode" in said, said
    assert "damaged" not in said
    assert sqlite_store(folder / "mlflow.db").state == "current"   # writable again: the same file is a store


def half_converted(path):
    """The API's state database after MLflow made its tables in it (what `embinit report` once did to it):
    MLflow's tables and revision beside the API's own `experiments`."""
    import sqlalchemy
    from mlflow.store.db import utils
    engine = sqlalchemy.create_engine(f"sqlite:///{state_db(path)}")
    try:
        utils._initialize_tables(engine)
    finally:
        engine.dispose()
    return path


def test_a_newer_mlflows_store_is_not_taken_for_another_applications(real, tmp_path):
    import sqlite3
    from helpers.bad_stores import copy_store
    db = copy_store(real, tmp_path / "newer.db")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    conn.commit()
    conn.close()
    with pytest.raises(EmbinitError, match=r"has MLflow schema revision ffffffffffff, which the installed MLflow "
                                           r"\S+ does not know \(written by a newer MLflow\?\); upgrade mlflow"):
        sqlite_store(db)


@pytest.fixture(scope="module")
def pg_server():
    from helpers.postgres import local_server_or_skip
    with local_server_or_skip() as uri:
        yield uri


def _database(server: str, name: str) -> str:
    """A new database `name` on the server, by its URL."""
    import sqlalchemy
    engine = sqlalchemy.create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    finally:
        engine.dispose()
    return server.rsplit("/", 1)[0] + "/" + name


def _tables(uri: str) -> list[str]:
    import sqlalchemy
    engine = sqlalchemy.create_engine(uri)
    try:
        return sorted(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_new_database_on_a_server_becomes_a_store_and_is_then_told_current(pg_server):
    from embinit.tracking.store_check import database_store
    uri = _database(pg_server, "fresh")
    assert database_store(uri).state == "empty"
    with pytest.raises(EmbinitError, match=r"no MLflow store in the database postgresql\+psycopg://embinit@"
                                           r"127\.0\.0\.1:\d+/fresh \(it has no tables\)"):
        require_store(uri)                      # a command that only reads never creates it ...
    assert _tables(uri) == []                   # ... where MLflow's client would have
    assert prepare_store(uri) == "created"
    store = database_store(uri)
    assert (store.state, store.revision) == ("current", store.head) and "experiments" in _tables(uri)
    require_store(uri)


def test_another_applications_database_on_a_server_is_refused_and_left_as_it_is(pg_server):
    """The API's state database has an `experiments` table of its own: MLflow would make its tables beside
    it (as `embinit report` once did to a SQLite state file)."""
    from service.db import make_engine
    uri = _database(pg_server, "state")
    make_engine(uri).dispose()
    before = _tables(uri)
    message = (r"postgresql\+psycopg://embinit@127\.0\.0\.1:\d+/state is not an MLflow store: it has tables "
               r"\[experiments[^]]*\]; give a new database or an MLflow store$")
    for command in (prepare_store, require_store):
        with pytest.raises(EmbinitError, match=message):
            command(uri)
    assert _tables(uri) == before


def test_an_old_store_on_a_server_says_how_to_upgrade_it_and_an_absent_server_is_named(pg_server, real):
    import sqlalchemy
    from helpers.bad_stores import stamped_old
    from embinit.tracking.store_check import database_store
    uri = _database(pg_server, "old")
    prepare_store(uri)
    _, revision = stamped_old(real, real.parent / "for-revision.db")   # an older revision this MLflow knows
    engine = sqlalchemy.create_engine(uri)
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    engine.dispose()
    assert database_store(uri).state == "old"
    with pytest.raises(EmbinitError, match=rf"/old has an out-of-date schema \(revision {revision}; .*upgrade it "
                                           r"with `mlflow db upgrade DATABASE_URL`"):
        require_store(uri)
    with pytest.raises(EmbinitError, match=r"cannot read the MLflow store postgresql\+psycopg://u:\*\*\*@127\.0\.0\.1:1"
                                           r"/mlflow: OperationalError") as e:
        database_store("postgresql+psycopg://u:s3cret@127.0.0.1:1/mlflow", timeout_s=3)
    assert "s3cret" not in str(e.value)


def test_a_dry_run_reads_a_database_servers_store_and_refuses_another_applications(pg_server, tmp_path):
    """The dry run shows which trials a PostgreSQL store has finished (it read only SQLite files before),
    never making tables where there are none, and refuses the database the run would refuse."""
    from embinit.tracking import mlflow_store
    from embinit.cli.dry_run import dry_run
    from embinit.spec import load_spec
    from embinit.tracking.trial_run import TrialRun
    uri = _database(pg_server, "dry")
    spec = load_spec({"name": "dry", "tasks": [{"task": "synthetic_translation", "epochs": 2}],
                      "inits": ["xavier"], "seeds": 2, "mlflow": {"tracking_uri": uri},
                      "cache_dir": str(tmp_path / "cache")})
    assert "already finished" not in dry_run(spec) and _tables(uri) == []   # a new database: nothing made
    prepare_store(uri)
    exp = mlflow_store.ensure_experiment("dry", uri)
    first = spec.plan()[0]
    TrialRun.open(uri, exp, None, first.config, first.key, first.label, {}).finish(
        {"status": "finished", "history": [], "best": {"val/loss": 0.5}, "best_epoch": 2}, [])
    text = dry_run(spec)
    assert "1 of the 2 trials already finished in experiment" in text, text
    state = _database(pg_server, "state2")
    from service.db import make_engine
    make_engine(state).dispose()
    with pytest.raises(EmbinitError, match=r"/state2 is not an MLflow store: it has tables \[experiments"):
        dry_run(spec, state)


def test_a_dry_run_planned_where_the_database_is_not_reachable_still_prints_the_plan(tmp_path):
    """Planned on a laptop for a cluster whose PostgreSQL it cannot reach: the plan, with a note."""
    from embinit.cli.dry_run import dry_run
    from embinit.spec import load_spec
    uri = "postgresql+psycopg://u:s3cret@127.0.0.1:1/mlflow"
    spec = load_spec({"name": "away", "tasks": [{"task": "synthetic_translation", "epochs": 2}],
                      "inits": ["xavier"], "seeds": 2, "mlflow": {"tracking_uri": uri},
                      "cache_dir": str(tmp_path / "cache")})
    text = dry_run(spec)
    assert "2 trials; MLflow experiment 'away'" in text, text
    assert ("note: cannot read the MLflow store postgresql+psycopg://u:***@127.0.0.1:1/mlflow: OperationalError"
            in text and "the trials it has finished are not counted here" in text and "s3cret" not in text)


def test_an_out_of_date_store_is_told_how_to_upgrade_by_where_it_is():
    # a database server's store (path: its masked URL) is backed up with that server's tools; a SQLite
    # file with SQLite's .backup, and `embinit run` keeps a copy of it beside it
    from pathlib import Path

    from embinit.cli.dry_run_store import store_lines
    from embinit.redact import masked
    from embinit.tracking.store_check import StoreState, out_of_date

    server = StoreState(masked("postgresql+psycopg://u:secret@db:5432/mlflow"), "old", "r1", "r2")
    file = StoreState(Path("/data/mlflow.db"), "old", "r1", "r2")
    assert (server.on_server, file.on_server) == (True, False)
    assert "`mlflow db upgrade DATABASE_URL`" in out_of_date(server) and "secret" not in out_of_date(server)
    assert "sqlite3 /data/mlflow.db \".backup /data/mlflow.db.bak\"" in out_of_date(file)
    assert "keeping no copy of a database server's store" in store_lines(server)[1]
    assert "keeping a copy at /data/mlflow.db.bak-r1" in store_lines(file)[1]
