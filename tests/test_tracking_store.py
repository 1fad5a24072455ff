"""A fresh MLflow store is created once, under a lock, before anything else opens it (issue 20, item 7):
several processes at once on a new `mlflow.db`, the API at startup, and `run_sweep` (the CLI path)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from embinit.errors import EmbinitError
from embinit.tracking.store_check import is_database
from embinit.tracking.prepare import prepare_store
from helpers.bad_stores import copy_store, notes_db, random_bytes, snapshot, state_db
from service.fakes import FakeCluster, FakeRunner
from service.main import create_app
from service.settings import Settings
from service.store import ResultStore

# Each process waits for the same instant, prepares the store, then does what the service's driver and
# its first read do first.
RACER = """
import sys, time
from embinit.tracking.prepare import prepare_store
from embinit.tracking import mlflow_store
uri, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
print(prepare_store(uri))
mlflow_store.ensure_experiment("race", uri)
print(mlflow_store.experiment_id("race", uri) is not None)
"""


def _schema(uri: str) -> tuple[str, str]:
    import sqlalchemy
    from mlflow.store.db import utils

    engine = sqlalchemy.create_engine(uri)
    try:
        return utils._get_schema_version(engine), utils._get_latest_schema_revision()
    finally:
        engine.dispose()


@pytest.mark.slow
def test_processes_opening_a_fresh_store_at_once_create_it_once(tmp_path):
    uri = f"sqlite:///{tmp_path}/store/mlflow.db"   # its folder does not exist yet either
    start = time.time() + 8  # every process has imported mlflow by then
    procs = [subprocess.Popen([sys.executable, "-c", RACER, uri, str(start)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    results = sorted(out.split()[0] for out, _ in outs)
    assert results == ["created", "current", "current"]
    assert all(out.split()[1] == "True" for out, _ in outs)
    current, head = _schema(uri)
    assert current == head


def test_prepare_store_is_idempotent_and_skips_servers(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert prepare_store(uri) == "created"
    assert prepare_store(uri) == "current"
    assert prepare_store("http://127.0.0.1:1") == "external"   # nothing is contacted
    assert is_database("postgresql+psycopg://u@h/db") and not is_database("https://mlflow.example")


def test_a_store_under_a_file_is_refused_naming_the_file(tmp_path):
    """sqlite:///notes.txt/mlflow.db said "could not be created or upgraded: FileExistsError: [Errno 17]
    File exists: '.../notes.txt'"."""
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(EmbinitError) as e:
        prepare_store(f"sqlite:///{tmp_path}/notes.txt/mlflow.db")
    assert str(e.value) == (f"the MLflow store {tmp_path}/notes.txt/mlflow.db cannot be made: "
                            f"'{tmp_path}/notes.txt' is a file, not a folder")
    assert (tmp_path / "notes.txt").read_text() == "x"


def test_a_sqlite_store_is_in_wal_mode_so_readers_do_not_block_writers(tmp_path):
    """In SQLite's rollback journal a commit waits for every reader; in WAL mode a long read (a report
    over thousands of runs) and a trial's commit go on at once. The mode is kept in the file."""
    db = tmp_path / "mlflow.db"
    prepare_store(f"sqlite:///{db}")
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    reader, writer = sqlite3.connect(db, timeout=0.2), sqlite3.connect(db, timeout=0.2)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM runs").fetchone()      # a read transaction stays open ...
    writer.execute("INSERT INTO experiment_tags (key, value, experiment_id) VALUES ('k', 'v', 0)")
    writer.commit()                                             # ... and the write commits at once
    reader.rollback()
    old = copy_store(db, tmp_path / "old.db")                   # a store made before, in rollback mode ...
    assert sqlite3.connect(old).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    prepare_store(f"sqlite:///{old}")                           # ... switched on open
    assert sqlite3.connect(old).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_broken_store_is_a_clear_error_and_stays_as_it_was(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"not a database at all" * 100)
    with pytest.raises(EmbinitError, match=r"mlflow.db is not an SQLite database \(it does not start with SQLite's "
                                           r"header\); give a new file or an MLflow store"):
        prepare_store(f"sqlite:///{db}")
    assert db.read_bytes() == b"not a database at all" * 100


@pytest.mark.parametrize("make, message", [
    (notes_db, r"is not an MLflow store: it has tables \[notes\]; give a new file or an MLflow store"),
    (state_db, r"is not an MLflow store: it has tables \[experiments[^]]*\]; give a new file or an MLflow store"),
    (random_bytes, r"is not an SQLite database"),
])
def test_a_file_that_is_no_mlflow_store_is_never_made_one(make, message, tmp_path):
    """`embinit run` and the API create a store in a new or empty file only: another application's
    database (the API's own state database among them) is refused as it is, not given MLflow's ~200
    tables, an alembic stamp and WAL mode beside its own; no lock file is made beside it either."""
    db = make(tmp_path / "other.db")
    before = snapshot(db)
    with pytest.raises(EmbinitError, match=message):
        prepare_store(f"sqlite:///{db}")
    assert snapshot(db) == before


def test_an_empty_file_becomes_a_store(tmp_path):
    (tmp_path / "mlflow.db").write_bytes(b"")
    assert prepare_store(f"sqlite:///{tmp_path}/mlflow.db") == "created"
    assert _schema(f"sqlite:///{tmp_path}/mlflow.db")[0] is not None


def _old_store(db: Path, revisions_back: int = 3) -> str:
    """A store as an older MLflow made it: MLflow's first tables, migrated up to a revision a few before
    the installed MLflow's head. Returns that revision."""
    import sqlalchemy
    from alembic import command
    from alembic.script import ScriptDirectory
    from mlflow.store.db import utils

    uri = f"sqlite:///{db}"
    engine = sqlalchemy.create_engine(uri)
    utils.InitialBase.metadata.create_all(engine)
    config = utils._get_alembic_config(uri)
    revision = [r.revision for r in ScriptDirectory.from_config(config).walk_revisions()][revisions_back]
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    engine.dispose()
    return revision


def test_an_old_store_is_copied_before_it_is_upgraded_and_the_copy_is_named(tmp_path, caplog):
    db = tmp_path / "mlflow.db"
    old = _old_store(db)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO experiments (name, lifecycle_stage) VALUES ('kept', 'active')")
    conn.commit()
    conn.close()
    with caplog.at_level("WARNING", logger="embinit.tracking"):
        assert prepare_store(f"sqlite:///{db}") == "upgraded"
    copy = tmp_path / f"mlflow.db.bak-{old}"
    current, head = _schema(f"sqlite:///{db}")
    assert current == head != old
    assert _schema(f"sqlite:///{copy}")[0] == old       # the copy is the store as it was
    assert sqlite3.connect(copy).execute("SELECT name FROM experiments").fetchall() == [("kept",)]
    assert f"from schema {old} to {head}; the store as it was is kept at {copy}" in caplog.text
    assert prepare_store(f"sqlite:///{db}") == "current"   # nothing copied again
    assert sorted(p.name for p in tmp_path.glob("mlflow.db.bak-*")) == [copy.name]


def test_the_api_creates_the_store_before_it_accepts_work(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=uri, data_roots=[tmp_path],
                        pretrained_roots=[tmp_path], _env_file=None)
    app = create_app(settings, runner=FakeRunner(FakeCluster()), store=ResultStore(uri))
    assert not (tmp_path / "mlflow.db").exists()
    with TestClient(app) as client:
        assert (tmp_path / "mlflow.db").exists()    # created during startup, before the first request
        current, head = _schema(uri)
        assert current == head
        assert client.get("/health").json()["status"] == "ok"


def test_run_sweep_prepares_the_store_before_anything_else(tmp_path, monkeypatch):
    from embinit.sweep import run as sweep_run

    calls = []

    def prepare(uri):
        calls.append(uri)
        raise RuntimeError("stop here")
    monkeypatch.setattr(sweep_run, "prepare_store", prepare)
    monkeypatch.setattr(sweep_run.mlflow_store, "ensure_experiment", lambda *a: pytest.fail("store opened first"))
    spec = {"name": "prep", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}
    with pytest.raises(RuntimeError, match="stop here"):
        sweep_run.run_sweep(spec, tracking_uri=f"sqlite:///{tmp_path}/m.db")
    assert calls == [f"sqlite:///{tmp_path}/m.db"]


def _numbered(order: list[str], m) -> str:
    return f"${order.index(m.group(1)) + 1}"


def _key_search_plans(uri: str) -> list[str]:
    """The database's plan for each SQL statement a worker's trial-key lookup runs
    (`run_readers.key_records`), with sequential scans off on PostgreSQL (whose planner scans a table this
    small whatever indexes it has): which index each can use. On PostgreSQL the plan is the generic one,
    what a statement prepared on a connection (psycopg does so at its sixth run) may keep for good."""
    import functools
    import re

    import sqlalchemy
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from embinit.tracking import mlflow_store, run_readers, trial_run
    exp = mlflow_store.ensure_experiment("keys", uri)
    for seed in range(3) if not run_readers.key_records(exp, uri, "key-1") else ():   # the first time
        trial_run.TrialRun.open(uri, exp, None, {"task": "synthetic_translation", "init": "xavier", "seed": seed},
                                f"key-{seed}", "Xavier", {})
    seen: list = []

    def keep(conn, cursor, statement, parameters, context, executemany):
        if "key-1" in str(parameters):
            seen.append((statement, parameters))
    event.listen(Engine, "before_cursor_execute", keep)
    try:
        assert [r.key for r in run_readers.key_records(exp, uri, "key-1")] == ["key-1"]
    finally:
        event.remove(Engine, "before_cursor_execute", keep)
    assert seen
    engine = sqlalchemy.create_engine(uri)
    plans = []
    try:
        with engine.connect() as conn:
            for statement, parameters in seen:
                if engine.dialect.name == "postgresql":
                    order = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", statement)))   # -> $1, $2, ...
                    numbered = re.sub(r"%\((\w+)\)s", functools.partial(_numbered, order), statement)
                    values = ", ".join(str(v) if isinstance(v, int) else "'" + str(v).replace("'", "''") + "'"
                                       for v in (parameters[n] for n in order))
                    conn.exec_driver_sql("SET enable_seqscan = off")
                    conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
                    conn.exec_driver_sql("DEALLOCATE ALL")
                    conn.exec_driver_sql("PREPARE lookup AS " + numbered.replace("%%", "%"))
                    rows = conn.exec_driver_sql(f"EXPLAIN EXECUTE lookup({values})").fetchall()
                else:
                    rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).fetchall()
                plans.append("\n".join(str(r[-1]) for r in rows))
        return plans
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_uri(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/mlflow.db"
        return
    from helpers.postgres import local_server_or_skip
    with local_server_or_skip() as uri:
        yield uri


def test_a_trial_key_lookup_uses_embinits_index_not_a_scan_of_every_key(store_uri):
    """MLflow indexes tags by (key, run): without the partial index the lookup read every trial key of
    the experiment, once per trial (9.4 ms against 2.5 ms at 3,200 runs, measured by hand on a
    bench_trial_writes store)."""
    from embinit.tracking.prepare import TRIAL_KEY_INDEX
    prepare_store(store_uri)
    plans = _key_search_plans(store_uri)
    assert all(TRIAL_KEY_INDEX in plan for plan in plans), plans


def test_a_store_a_tracking_server_made_gets_the_index_from_the_api(store_uri):
    """Behind a tracking server the API never creates or migrates the store; it adds the index through
    the database it reads, once the tables exist."""
    import sqlalchemy
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from embinit.tracking.prepare import TRIAL_KEY_INDEX, index_trial_keys
    assert not index_trial_keys(store_uri)                       # no tables yet: nothing done
    engine = sqlalchemy.create_engine(store_uri)
    assert not sqlalchemy.inspect(engine).get_table_names()      # ... and no table made
    engine.dispose()
    SqlAlchemyStore(store_uri, str(Path(tempfile.mkdtemp())))   # what `mlflow server` does on start
    assert not any(TRIAL_KEY_INDEX in plan for plan in _key_search_plans(store_uri))
    store = ResultStore("http://127.0.0.1:1", read_uri=store_uri)
    assert store.prepare() == "external, trial keys indexed"
    assert all(TRIAL_KEY_INDEX in plan for plan in _key_search_plans(store_uri))
    assert index_trial_keys(store_uri)                            # again: nothing changes


def test_trials_write_to_a_database_only_when_it_is_the_servers_store(tmp_path, store_uri):
    """`EMBINIT_TRACKING_WRITE_DIRECT`: before any trial writes to the database behind the tracking server,
    the sweep checks that it holds the server's experiment under the server's id; every problem is named."""
    from embinit.tracking import mlflow_store
    from embinit.tracking.prepare import check_store_behind

    server = "http://mlflow:5000"
    prepare_store(store_uri)
    exp = mlflow_store.ensure_experiment("direct", store_uri)
    assert check_store_behind(server, store_uri, "direct", exp) == mlflow_store.resolve_uri(store_uri)
    with pytest.raises(EmbinitError, match="the server has experiment 'direct' as id 999, the database as id"):
        check_store_behind(server, store_uri, "direct", "999")             # another server's store
    with pytest.raises(EmbinitError, match="the database does not have it"):
        check_store_behind(server, store_uri, "elsewhere", exp)
    with pytest.raises(EmbinitError) as e:                                   # both problems at once
        check_store_behind(store_uri, "http://other:5000", "direct", exp)
    assert "is not an `mlflow server`" in str(e.value) and "is not a SQL database URL" in str(e.value)


def test_a_database_that_is_not_there_is_named_quickly_and_never_made(tmp_path):
    """MLflow's own store would retry an unreachable database for most of an hour and create a SQLite file
    that is missing; the check reads with plain SQL and a connect timeout, and hides the password."""
    from embinit.tracking.prepare import check_store_behind

    missing = tmp_path / "nowhere" / "mlflow.db"
    with pytest.raises(EmbinitError, match="there is no file"):
        check_store_behind("http://mlflow:5000", f"sqlite:///{missing}", "x", "1")
    assert not missing.parent.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(EmbinitError, match="cannot be read as an MLflow store: OperationalError"):
        check_store_behind("http://mlflow:5000", f"sqlite:///{empty}", "x", "1")   # no MLflow tables
    start = time.monotonic()
    with pytest.raises(EmbinitError, match="cannot be read as an MLflow store") as e:
        check_store_behind("http://mlflow:5000", "postgresql+psycopg://mlflow:s3cret@127.0.0.1:1/mlflow", "x", "1")
    assert time.monotonic() - start < 15
    assert "s3cret" not in str(e.value) and "mlflow:***@127.0.0.1:1" in str(e.value)


def test_the_api_hands_its_drivers_the_database_only_when_told_to(tmp_path):
    """The API gives each experiment's driver the database behind its tracking server to write the trials'
    runs to only with EMBINIT_TRACKING_WRITE_DIRECT, which needs EMBINIT_TRACKING_READ_URI."""
    db = f"sqlite:///{tmp_path}/behind.db"
    assert ResultStore("http://mlflow:5000", read_uri=db).trial_store_uri is None
    assert ResultStore("http://mlflow:5000", read_uri=db, write_direct=True).trial_store_uri == db
    with pytest.raises(EmbinitError, match="EMBINIT_TRACKING_WRITE_DIRECT needs EMBINIT_TRACKING_READ_URI"):
        ResultStore("http://mlflow:5000", write_direct=True)
    for direct, expected in ((False, None), (True, db)):
        cluster = FakeCluster()
        settings = Settings(database_url=f"sqlite:///{tmp_path}/state-{direct}.db", tracking_uri="http://127.0.0.1:1",
                            tracking_read_uri=db, tracking_write_direct=direct, data_roots=[], pretrained_roots=[],
                            check_cluster_resources=False)
        store = ResultStore(settings.tracking_uri, read_uri=db, write_direct=direct)
        with TestClient(create_app(settings, runner=FakeRunner(cluster), store=store)) as api:
            r = api.post("/experiments", json={"name": f"direct-{direct}", "seeds": [0], "inits": ["xavier"],
                                               "tasks": [{"task": "synthetic_classification", "epochs": 1}]})
            assert r.status_code in (200, 201, 202), r.text
        (started,) = cluster.specs.values()
        assert started["store_uri"] == expected
