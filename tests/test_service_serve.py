"""`embinit serve`: embedded defaults, what it prints, and where it listens (uvicorn is replaced by a
recorder, so no server or Ray starts here; the real stack runs in tests/test_service_cluster.py), and a
second one in the same folder or on a taken port, refused in one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import uvicorn

from embinit.cli import main
from embinit.holders import holder_id

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def served(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name in ("EMBINIT_RAY_ADDRESS", "EMBINIT_TRACKING_URI", "EMBINIT_DATABASE_URL", "EMBINIT_MLFLOW_UI_URL"):
        monkeypatch.delenv(name, raising=False)
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append((app, kw)))
    import ray
    monkeypatch.setattr(ray, "init", lambda **kw: None)   # `serve` joins a cluster given by address first
    return calls


def test_serve_defaults(served, capsys):
    assert main(["serve", "--port", "8123"]) == 0
    app, kwargs = served[0]
    assert kwargs["host"] == "127.0.0.1" and kwargs["port"] == 8123
    settings = app.state.settings
    assert settings.database_url == "sqlite:///embinit-state.db" and settings.tracking_uri == "sqlite:///mlflow.db"
    assert settings.ray_address is None and app.state.runner.describe().startswith("local ray")
    out = capsys.readouterr().out
    assert "docs: http://127.0.0.1:8123/docs" in out
    assert "mlflow ui --backend-store-uri sqlite:///mlflow.db --port 5000" in out
    assert settings.mlflow_ui_url == "http://127.0.0.1:5000"  # the links point where that UI serves


def test_serve_on_an_existing_cluster(served, capsys, monkeypatch):
    monkeypatch.setenv("EMBINIT_TRACKING_URI", "http://mlflow:5000")
    assert main(["serve", "--host", "0.0.0.0", "--port", "9000", "--ray-address", "ray://head:10001"]) == 0
    app, kwargs = served[0]
    assert kwargs["host"] == "0.0.0.0" and app.state.settings.ray_address == "ray://head:10001"
    assert app.state.runner.describe() == "ray at ray://head:10001"
    out = capsys.readouterr().out
    assert "open http://mlflow:5000 (the MLflow server)" in out and app.state.settings.mlflow_ui_url is None
    # 0.0.0.0 is no address to open: the banner names the machine (the operator walkthrough)
    assert f"embinit API on every interface (0.0.0.0), port 9000: e.g. http://{socket.gethostname()}:9000" in out
    assert "http://0.0.0.0" not in out


def test_the_banner_says_the_object_store_and_whether_a_token_is_asked(served, capsys, monkeypatch):
    """What an operator checks a lab setup by (seen missing on one: the banner named the state database,
    MLflow and Ray, not whether checkpoints go to the store or the API asks for a token)."""
    monkeypatch.delenv("EMBINIT_STORAGE_URI", raising=False)
    monkeypatch.delenv("EMBINIT_API_TOKEN", raising=False)
    assert main(["serve"]) == 0
    out = capsys.readouterr().out
    assert "object store: none (EMBINIT_STORAGE_URI unset: trial checkpoints stay on each node's disk)" in out
    assert "API token: none (EMBINIT_API_TOKEN unset: whoever reaches the port may submit and cancel)" in out
    monkeypatch.setenv("EMBINIT_STORAGE_URI", "s3://embinit-runs/team-a")
    monkeypatch.setenv("EMBINIT_API_TOKEN", "t0ken")
    assert main(["serve"]) == 0
    out = capsys.readouterr().out
    assert "object store: s3://embinit-runs/team-a (EMBINIT_STORAGE_URI)" in out
    assert "API token: required on POST and DELETE" in out and "t0ken" not in out


def test_a_limit_of_zero_or_less_is_refused_at_start(served, capsys, monkeypatch):
    """EMBINIT_MAX_PROBLEMS=0 started an API whose 422s listed no problem ("only the first 0 are listed"),
    -1 one that cut the last; a body limit or timeout of 0 refused every request."""
    for name, value in (("EMBINIT_MAX_PROBLEMS", "0"), ("EMBINIT_MAX_BODY_BYTES", "-5"),
                        ("EMBINIT_BODY_TIMEOUT_S", "0"), ("EMBINIT_MAX_TRIALS_PER_EXPERIMENT", "0")):
        monkeypatch.setenv(name, value)
    assert main(["serve"]) == 2
    assert capsys.readouterr().err == (
        "embinit: error: invalid EMBINIT_* setting: EMBINIT_MAX_BODY_BYTES: Input should be greater than or equal "
        "to 1, got '-5'; EMBINIT_BODY_TIMEOUT_S: Input should be greater than 0, got '0'; "
        "EMBINIT_MAX_TRIALS_PER_EXPERIMENT: Input should be greater than or equal to 1, got '0'; "
        "EMBINIT_MAX_PROBLEMS: Input should be greater than or equal to 1, got '0'\n")
    assert not served


def test_a_list_setting_that_is_not_json_is_listed_with_the_other_bad_settings(served, capsys, monkeypatch):
    """EMBINIT_DATA_ROOTS=/data (not JSON) was pydantic-settings' SettingsError: a traceback, the other bad
    values unsaid. The environment is left as it was."""
    import os
    monkeypatch.setenv("EMBINIT_DATA_ROOTS", "/data")
    monkeypatch.setenv("EMBINIT_MAX_BODY_BYTES", "lots")
    assert main(["serve"]) == 2
    assert capsys.readouterr().err == (
        "embinit: error: invalid EMBINIT_* setting: EMBINIT_DATA_ROOTS: not JSON (a list is written as JSON, e.g. "
        "EMBINIT_DATA_ROOTS='[\"/data\"]'), got '/data'; EMBINIT_MAX_BODY_BYTES: Input should be a valid integer, "
        "unable to parse string as an integer, got 'lots'\n")
    assert os.environ["EMBINIT_DATA_ROOTS"] == "/data"


def test_bad_setting_is_a_one_line_error(served, capsys, monkeypatch):
    monkeypatch.setenv("EMBINIT_MAX_BODY_BYTES", "lots")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("embinit: error: invalid EMBINIT_* setting")
    assert "EMBINIT_MAX_BODY_BYTES: Input should be a valid integer" in err
    assert len(err.strip().splitlines()) == 1
    assert not served


def test_a_cluster_it_cannot_join_is_a_one_line_error_naming_the_token(served, capsys, monkeypatch):
    """Seen on a lab cluster with token auth: an API started without RAY_AUTH_MODE=token waited 30 s for
    the Ray Client, then printed uvicorn's startup traceback ending in "ray client connection timeout"."""
    import ray

    def refused(**kw):
        raise ConnectionError("ray client connection timeout")
    monkeypatch.setattr(ray, "init", refused)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert main(["serve", "--ray-address", "ray://head:10001"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not served
    assert err.startswith("embinit: error: cannot connect to the Ray cluster at ray://head:10001")
    assert "ray client connection timeout" in err and "10001" in err
    assert "RAY_AUTH_MODE=token" in err and "RAY_AUTH_MODE is unset here" in err


def test_serve_limits_connections_and_keeps_ray_auth_for_clusters(served, monkeypatch):
    from service.serving import HeaderTimeoutH11Protocol
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setenv("EMBINIT_HEADER_TIMEOUT_S", "3.5")
    assert main(["serve", "--ray-address", "ray://head:10001"]) == 0
    _, kwargs = served[0]
    assert issubclass(kwargs["http"], HeaderTimeoutH11Protocol) and kwargs["http"].header_timeout_s == 3.5
    assert kwargs["timeout_keep_alive"] == 5 and kwargs["limit_concurrency"] == 1000
    assert "RAY_AUTH_MODE" not in os.environ   # a cluster's token auth is left as it is
    assert main(["serve"]) == 0                               # the local Ray (loopback only): off
    assert os.environ["RAY_AUTH_MODE"] == "disabled"


def test_a_second_serve_in_the_same_folder_is_refused_in_one_line(tmp_path):
    """Its state database is owned (here by this process, alive, as a running `embinit serve` owns it): the
    app's startup refused it, and uvicorn printed the refusal's traceback and exited 3. Now: one line
    naming the database and its owner, exit 2, and nothing started (no banner, no MLflow store)."""
    from service.db import make_sessionmaker, utcnow
    from service.lease import ROW, LeaseRow

    with make_sessionmaker(f"sqlite:///{tmp_path}/embinit-state.db")() as s:
        s.add(LeaseRow(name=ROW, holder=holder_id(), version=0, heartbeat_at=utcnow(), acquired_at=utcnow()))
        s.commit()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBINIT_")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    out = subprocess.run([sys.executable, "-m", "embinit", "serve", "--port", str(port)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.startswith(f"embinit: error: the state database sqlite:///{tmp_path}/embinit-state.db is "
                                 f"owned by another embinit API ({holder_id()}, last heartbeat"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert out.stdout == "" and not (tmp_path / "mlflow.db").exists()


def test_a_taken_port_is_refused_in_one_line_naming_who_listens(served, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"embinit: error: port {port} on 127.0.0.1 is already in use by pid {os.getpid()} (")
    assert err.rstrip().endswith("stop it or choose another --port") and len(err.strip().splitlines()) == 1
    assert not served and "embinit API on" not in capsys.readouterr().out    # nothing started
    from service.db import make_sessionmaker
    from service.lease import LeaseRow
    with make_sessionmaker("sqlite:///embinit-state.db")() as s:   # the lease it took first was given back
        assert s.query(LeaseRow).count() == 0
