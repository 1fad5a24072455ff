"""`embinit.store_check`: a tracking URI's shape and what a SQLite file is as an MLflow store, told before
MLflow opens it (MLflow would make any SQLite file an MLflow store), without writing to the file."""

from __future__ import annotations

import pytest

from embinit.errors import EmbinitError
from embinit.store_check import resolved, sqlite_store, uri_problem
from embinit.tracking_store import prepare_store
from helpers.bad_stores import notes_db, random_bytes, snapshot, stamped_old, state_db, truncated


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
