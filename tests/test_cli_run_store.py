"""`embinit run --store-uri` (or $EMBINIT_TRACKING_STORE_URI): a CLI sweep against an `mlflow server` hands
the database behind it to the sweep, which writes the trials' run records there (as the service does
with EMBINIT_TRACKING_WRITE_DIRECT); a store that cannot be that database is refused in one line before
anything trains; an interrupted run prints a resume command with the cluster and stores it was given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from embinit.cli import main
from embinit.cli.run import STORE_ENV

ROOT = Path(__file__).resolve().parents[1]
SERVER = "http://127.0.0.1:5999"


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("name: store-flag\ntasks:\n  - task: synthetic_translation\n    epochs: 1\n"
                    "    max_train_examples: 50\ninits: [xavier]\nseeds: 1\n")
    return str(path)


@pytest.fixture
def sweep_args(monkeypatch):
    """run_sweep's keyword arguments; the sweep is then interrupted (Ctrl-C) before it starts."""
    seen: dict = {}

    def interrupted(spec, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr("embinit.sweep.run_sweep", interrupted)
    monkeypatch.delenv(STORE_ENV, raising=False)
    return seen


def test_the_store_flag_reaches_the_sweep_and_the_resume_command(spec, sweep_args, capsys):
    store = "sqlite:////srv/mlflow/mlflow.db"
    assert main(["run", spec, "epochs=2", "--tracking-uri", SERVER, "--store-uri", store, "--quiet"]) == 130
    assert sweep_args["store_uri"] == store and sweep_args["tracking_uri"] == SERVER
    err = capsys.readouterr().err
    assert f"embinit run {spec} epochs=2 --tracking-uri {SERVER} --store-uri {store}` again to resume" in err


def test_the_store_variable_is_the_default_and_stays_out_of_printed_commands(spec, sweep_args, monkeypatch, capsys):
    store = "postgresql+psycopg://mlflow:s3cret@db:5432/mlflow"
    monkeypatch.setenv(STORE_ENV, store)
    assert main(["run", spec, "--tracking-uri", SERVER, "--address", "10.0.0.5:6379"]) == 130
    assert sweep_args["store_uri"] == store and sweep_args["address"] == "10.0.0.5:6379"
    err = capsys.readouterr().err
    assert f"embinit run {spec} --address 10.0.0.5:6379 --tracking-uri {SERVER}` again to resume" in err
    assert "s3cret" not in err


def test_without_a_store_the_trials_write_through_the_tracking_uri(spec, sweep_args):
    assert main(["run", spec, "--quiet"]) == 130
    assert sweep_args["store_uri"] is None and sweep_args["tracking_uri"] is None


def test_a_store_that_cannot_be_the_servers_database_is_refused_in_one_line(tmp_path, spec):
    """With a SQLite tracking URI there is no server to bypass, and the store is no SQL database: both
    problems named at once, exit 2, before the tracking store is made or anything trains."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop(STORE_ENV, None)
    proc = subprocess.run([sys.executable, "-m", "embinit", "run", spec, "--tracking-uri",
                           f"sqlite:///{tmp_path}/mlflow.db", "--store-uri", "http://127.0.0.1:5999"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert "`embinit run --store-uri`" in lines[0]
    assert "is not an `mlflow server`" in lines[0] and "is not a SQL database URL" in lines[0]
    assert "trials finished" not in proc.stdout and not (tmp_path / "mlflow.db").exists()


@pytest.fixture
def no_training(monkeypatch):
    """A sweep that got past its store checks fails the test instead of training."""
    from embinit.sweep import run as sweep_run
    monkeypatch.setattr(sweep_run, "_execute", lambda *a: pytest.fail("the sweep started training"))


@pytest.mark.parametrize("kind, message", [
    ("notes", "is not an MLflow store: it has tables [notes]; give a new file or an MLflow store"),
    ("state", "is not an MLflow store: it has tables [experiments"),
    ("random", "is not an SQLite database (it does not start with SQLite's header)"),
])
def test_run_never_makes_another_file_an_mlflow_store(kind, message, spec, no_training, tmp_path, capsys):
    """`embinit run` once gave any SQLite file MLflow's tables, switched it to WAL and trained into it (the
    API's state database it half-converted, then failed on its `experiments` table). A new or empty file
    is a store to create; any other is refused in one line, its bytes, tables and folder as they were."""
    from helpers.bad_stores import notes_db, random_bytes, snapshot, state_db
    db = {"notes": notes_db, "state": state_db, "random": random_bytes}[kind](tmp_path / "other.db")
    before = snapshot(db)
    assert main(["run", spec, "--quiet", "--tracking-uri", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert f"{db} {message}" in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(db) == before


@pytest.mark.parametrize("shape, message", [
    ("sqlit:///{db}", "unknown scheme 'sqlit' in the tracking URI sqlit:///{db}: a store is sqlite:///PATH"),
    ("sqlite:{db}", "'sqlite:{db}' is not a SQLite URI: that is sqlite:/// then the file's path"),
    ("{db}", "'{db}' is a path, not a tracking URI (MLflow would read it as a folder of runs); for a SQLite store "
             "give sqlite:///{db}"),
])
def test_run_refuses_a_mistyped_store_uri_before_anything_is_made(shape, message, spec, no_training, tmp_path,
                                                                  capsys):
    db = tmp_path / "store" / "mlflow.db"
    assert main(["run", spec, "--quiet", "--tracking-uri", shape.format(db=db)]) == 2
    err = capsys.readouterr().err
    assert message.format(db=db) in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


def test_a_password_given_on_the_command_line_is_not_printed_in_the_resume_command(spec, sweep_args, capsys):
    """The resume command reads each URL with a password from its variable, says what to set, and runs as
    printed once they are set."""
    from test_printed_commands import expanded
    tracking, store = "http://me:s3cret1@mlflow:5000", "postgresql+psycopg://mlflow:s3cret2@db:5432/mlflow"
    assert main(["run", spec, "--tracking-uri", tracking, "--store-uri", store, "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "s3cret" not in err, err
    assert ("(set $EMBINIT_TRACKING_URI to http://me:***@mlflow:5000 and $EMBINIT_TRACKING_STORE_URI to "
            "postgresql+psycopg://mlflow:***@db:5432/mlflow, with the password (not printed), first)") in err
    resume = err.split("`")[1]
    words = expanded(resume, {"EMBINIT_TRACKING_URI": tracking, STORE_ENV: store}).stdout.splitlines()
    assert words == ["run", spec, "--tracking-uri", tracking, "--store-uri", store]


def test_the_summary_says_which_trials_another_sweep_trained_meanwhile(spec, monkeypatch, capsys):
    """Two `embinit run` of one spec on one store at once: each key trains once (the other waits on its
    claim and reuses it), yet both commands said "4/4 trials finished (0 reused)", as if each had trained
    all four; the sweep's run counted the other's work (`sweep/shared`), the command did not say it."""
    from embinit.sweep.run import SweepResult
    trials = [{"status": "finished"}] * 4
    monkeypatch.setattr("embinit.sweep.run_sweep", lambda spec, **kw: SweepResult(
        "demo", "1", "p", "sqlite:////tmp/x.db", planned=4, reused=0, trials=trials, wall_s=1.0, shared=3,
        report=None))
    assert main(["run", spec, "--quiet"]) == 0
    assert "4/4 trials finished (0 reused, 3 trained meanwhile by another sweep), 0 failed" in capsys.readouterr().out


def test_a_store_that_fails_mid_sweep_is_said_in_one_line_without_a_traceback(spec, monkeypatch, capsys):
    """The MLflow store's disk filled up during a sweep (measured on a full tmpfs): the sweep could not
    close its runs, and the command ended with MLflow's traceback ("database or disk is full"). It says
    so in one line, without claiming the runs were closed, and how the rerun recovers."""
    from mlflow.exceptions import MlflowException

    def full(spec, **kwargs):
        raise MlflowException("(sqlite3.OperationalError) database or disk is full")
    monkeypatch.setattr("embinit.sweep.run_sweep", full)
    monkeypatch.delenv(STORE_ENV, raising=False)
    assert main(["run", spec, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "the sweep stopped: the MLflow store failed: MlflowException: (sqlite3.OperationalError) database or " \
           "disk is full" in err
    assert "stay RUNNING until the spec runs again" in err and f"embinit run {spec}" in err
    assert "Traceback" not in err and "is closed as FAILED" not in err


def test_the_summary_says_how_many_finished_trials_diverged(spec, monkeypatch, capsys):
    """An lr at which 9 of 16 trials diverged ended with "16/16 trials finished (0 reused), 0 failed":
    diverged trials count as finished, but the table above has no value of theirs (formats walkthrough)."""
    from embinit.sweep.run import SweepResult
    trials = [{"status": "finished"}] * 3 + [{"status": "diverged"}] * 2
    monkeypatch.setattr("embinit.sweep.run_sweep", lambda spec, **kw: SweepResult(
        "demo", "1", "p", "sqlite:////tmp/x.db", planned=5, reused=1, trials=trials, wall_s=1.0, report=None))
    assert main(["run", spec, "--quiet"]) == 0
    assert "5/5 trials finished (1 reused, 2 diverged), 0 failed" in capsys.readouterr().out
