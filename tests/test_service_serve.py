"""`embinit serve`: embedded defaults, what it prints, and where it listens (uvicorn is replaced by a
recorder, so no server or Ray starts here; the real stack runs in tests/test_service_cluster.py)."""

from __future__ import annotations

import os

import pytest
import uvicorn

from embinit.cli import main


@pytest.fixture
def served(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name in ("EMBINIT_RAY_ADDRESS", "EMBINIT_TRACKING_URI", "EMBINIT_DATABASE_URL", "EMBINIT_MLFLOW_UI_URL"):
        monkeypatch.delenv(name, raising=False)
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append((app, kw)))
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


def test_bad_setting_is_a_one_line_error(served, capsys, monkeypatch):
    monkeypatch.setenv("EMBINIT_MAX_BODY_BYTES", "lots")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("embinit: error: invalid EMBINIT_* setting")
    assert "EMBINIT_MAX_BODY_BYTES: Input should be a valid integer" in err
    assert len(err.strip().splitlines()) == 1
    assert not served


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
