"""`embinit report EXPERIMENT`: markdown / csv / json from MLflow alone, --plot, unknown experiment."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from embinit.tracking import mlflow_store, trial_run
from embinit.cli import main
from helpers.bad_stores import damaged_pages, notes_db, random_bytes, snapshot, stamped_old, state_db, truncated

pytestmark = pytest.mark.slow  # creates an MLflow SQLite store


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    exp = mlflow_store.ensure_experiment("cli", uri)
    for seed, (label, bleu) in enumerate([("Xavier", 30.0), ("Xavier", 32.0), ("GloVe", 20.0)]):
        run = trial_run.TrialRun.open(uri, exp, None, {"task": "multi30k", "seed": seed}, f"k{seed}", label, {})
        history = [{"epoch": 1, "val/loss": 3.0, "val/bleu": bleu / 2}, {"epoch": 2, "val/loss": 2.5, "val/bleu": bleu}]
        for h in history:
            run.log_epoch(h["epoch"], h)
        run.finish({"status": "finished", "history": history, "best": {"val/loss": 2.5, "val/loss_epoch": 2},
                    "test": {"test/bleu": bleu}, "best_epoch": 2}, [])
    return uri


def test_markdown(uri, capsys):
    assert main(["report", "cli", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "| multi30k | Xavier | test/bleu | 31.00 (1.41) | 2 | 2.0 |" in out
    assert "| multi30k | GloVe | test/bleu | 20.00 (-) | 1 |" in out


def test_csv_and_json(uri, capsys):
    assert main(["report", "cli", "--format", "csv", "--tracking-uri", uri]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["init"], r["n"]) for r in rows] == [("Xavier", "2"), ("GloVe", "1")]
    assert main(["report", "cli", "--format", "json", "--tracking-uri", uri]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rows"][0]["mean"] == pytest.approx(31.0) and data["failed"] == []


def test_plot(uri, tmp_path, capsys):
    assert main(["report", "cli", "--plot", str(tmp_path), "--tracking-uri", uri]) == 0
    assert (tmp_path / "multi30k.png").stat().st_size > 1000
    assert f"wrote {tmp_path / 'multi30k.png'}" in capsys.readouterr().out


def test_unknown_experiment(uri, capsys):
    assert main(["report", "nope", "--tracking-uri", uri]) == 2
    assert "no MLflow experiment 'nope'" in capsys.readouterr().err


def test_an_experiment_without_trial_runs_is_nothing_to_report(tmp_path, capsys):
    """Analysis runs alone (`embinit analogy --log-experiment`) printed an empty Table 1 and exited 0."""
    from embinit.tracking.run_writers import log_analysis_run
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    for i in range(2):
        log_analysis_run("analogies only", uri, "analogy", f"a{i}", {}, {"acc": 0.5}, {})
    mlflow_store.ensure_experiment("no runs", uri)
    capsys.readouterr()   # MLflow's lines making the store
    for name, held in (("analogies only", "2 analogy runs"), ("no runs", "no runs")):
        for fmt in ("markdown", "json"):
            assert main(["report", name, "--format", fmt, "--tracking-uri", uri]) == 2
            out, err = capsys.readouterr()
            assert out == "" and err == (f"embinit: error: MLflow experiment {name!r} in {uri} has no trial runs to "
                                         f"report (tagged embinit.trial_key, logged by `embinit run`); it holds "
                                         f"{held}\n")


def test_report_on_a_store_that_is_not_there_names_it_and_creates_nothing(tmp_path, capsys, monkeypatch):
    from embinit.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["report", "quickstart"]) == 2
    err = capsys.readouterr().err
    assert f"no MLflow store at {tmp_path / 'mlflow.db'} (the default, ./mlflow.db)" in err
    assert main(["report", "quickstart", "--tracking-uri", f"sqlite:///{tmp_path}/typo.db"]) == 2
    assert "typo.db (--tracking-uri)" in capsys.readouterr().err
    assert main(["reproduction", "--out", str(tmp_path / "r.md")]) == 2
    assert list(tmp_path.iterdir()) == []   # no empty database left behind


def test_reproduction_names_each_bad_file_option_before_reading_the_store(tmp_path, capsys):
    """A --preamble or --epilogue that is not there, an --out that is a folder, an --exports that is a
    file: each was a traceback once the report had been built (FileNotFoundError, IsADirectoryError).
    They are listed before the store is read, and nothing is made."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("x")
    assert main(["reproduction", "--tracking-uri", f"sqlite:///{tmp_path}/none.db", "--preamble",
                 str(tmp_path / "pre.md"), "--epilogue", str(tmp_path / "folder"), "--out", str(tmp_path / "folder"),
                 "--exports", str(tmp_path / "file.txt")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "embinit: error: cannot write the reproduction (4 problems):",
        f"  - --preamble: '{tmp_path}/pre.md' does not exist",
        f"  - --epilogue: '{tmp_path}/folder' is not a file",
        f"  - --out: '{tmp_path}/folder' is a folder; give the markdown file's path (e.g. {tmp_path}/folder/"
        f"reproduction.md)",
        f"  - --exports: '{tmp_path}/file.txt' is a file, not a folder"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "folder"]


def _bad_store(kind: str, real: Path, folder: Path) -> tuple[Path, str]:
    """(a file of `kind` given as the store, what the error says of it)."""
    if kind == "old":
        db, revision = stamped_old(real, folder / "old.db")
        return db, (f"the MLflow store {db} has an out-of-date schema (revision {revision}; MLflow "
                    f"{mlflow_version()} reads ")
    make = {"notes": notes_db, "state": state_db, "random": random_bytes,
            "truncated": lambda p: truncated(real, p)}[kind]
    db = make(folder / f"{kind}.db")
    return db, {"notes": f"{db} is not an MLflow store: it has tables [notes]; give a new file or an MLflow store",
                "state": f"{db} is not an MLflow store: it has tables [experiments",
                "random": f"{db} is not an SQLite database (it does not start with SQLite's header)",
                "truncated": f"{db} is a damaged SQLite database: truncated ("}[kind]


def mlflow_version() -> str:
    import mlflow
    return mlflow.__version__


@pytest.mark.parametrize("command", [["report", "cli"], ["reproduction"]])
@pytest.mark.parametrize("kind", ["notes", "state", "random", "truncated", "old"])
def test_a_file_that_is_no_current_mlflow_store_is_refused_and_left_as_it_was(kind, command, uri, tmp_path, capsys):
    """Commands that only read never create or migrate MLflow's tables: another application's database,
    a file that is no database, a damaged copy and a store of an older schema are each named in one
    line (exit 2), and the file keeps its bytes, its tables and its folder."""
    db, message = _bad_store(kind, Path(uri[len("sqlite:///"):]), tmp_path)
    before = snapshot(db)
    assert main([*command, "--tracking-uri", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(db) == before
    if kind == "old":
        assert (f'back it up (sqlite3 {db} ".backup {db}.bak") and upgrade it with `mlflow db upgrade '
                f'sqlite:///{db}`, or let `embinit run` with this store upgrade it (it keeps a copy)') in err


def test_a_store_damaged_past_its_schema_is_named_without_a_traceback(uri, tmp_path, capsys):
    """A store whose schema reads but whose tables' pages are damaged passes the check at open: the damage
    shows when a query reaches it. That was sqlalchemy's traceback (exit 1); now one line naming the
    file and how to look at and save it (exit 2), and the file keeps its bytes."""
    db = damaged_pages(Path(uri[len("sqlite:///"):]), tmp_path / "damaged.db")
    before = snapshot(db)
    assert main(["report", "cli", "--tracking-uri", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert err == (f'embinit: error: {db} is a damaged SQLite database: SQLite found "database disk image is '
                   f'malformed" reading its runs; restore it from a copy (`sqlite3 {db} "PRAGMA integrity_check"` '
                   f'lists the damage, `sqlite3 {db} .recover` saves what it can)\n')
    assert snapshot(db) == before


@pytest.mark.parametrize("command", [["report", "cli"], ["reproduction"]])
@pytest.mark.parametrize("shape, message", [
    ("sqlit:///{db}", "unknown scheme 'sqlit' in the tracking URI sqlit:///{db}: a store is sqlite:///PATH"),
    ("sqlite:{db}", "'sqlite:{db}' is not a SQLite URI: that is sqlite:/// then the file's path"),
    ("{db}", "'{db}' is a path, not a tracking URI (MLflow would read it as a folder of runs); for a SQLite store "
             "give sqlite:///{db}"),
])
def test_a_mistyped_store_uri_is_one_line_saying_what_is_wrong(shape, message, command, uri, capsys):
    db = uri[len("sqlite:///"):]
    before = snapshot(Path(db))
    assert main([*command, "--tracking-uri", shape.format(db=db)]) == 2
    err = capsys.readouterr().err
    assert message.format(db=db) in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(Path(db)) == before
