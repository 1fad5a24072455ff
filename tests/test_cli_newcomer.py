"""Rough edges a newcomer meets in the CLI, run as a user runs them (`python -m embinit ...` in a
subprocess): an invalid YAML spec names its line and column; a missing Multi30k folder fails at once,
offline, naming the `--data-dir` flag."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _embinit(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "embinit", *args], capture_output=True, text=True,
                          env=full, cwd=cwd or ROOT, timeout=120)


def test_invalid_yaml_spec_names_file_line_and_column(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\ntasks:\n  - task: synthetic_translation\n   epochs: 3\ninits: [xavier]\n")
    proc = _embinit("run", str(spec), "--dry-run")
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert f"not valid YAML in {str(spec)!r} at line 4, column 4: expected <block end>" in err
    assert "(while parsing a block collection at line 3, column 3)" in err


TRAIN = ("train", "--task", "multi30k", "--init", "xavier", "--seed", "0", "--epochs", "1")


def test_train_without_data_offline_fails_at_once_naming_the_flag(tmp_path):
    env = {"HF_HOME": str(tmp_path / "hf"), "EMBINIT_CACHE_DIR": str(tmp_path / "cache")}
    proc = _embinit(*TRAIN, env=env, cwd=tmp_path)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "no --data-dir given and $EMBINIT_DATA_DIR not set" in err
    assert "(HF_HUB_OFFLINE is set, and it is not in the local cache)" in err
    assert "pass it with --data-dir" in err and "train.{de,en}" in err


def test_train_without_data_and_no_network_never_asks_datasets(monkeypatch, tmp_path, capsys):
    """No HF_HUB_OFFLINE, but the hub does not answer: `datasets` (and its retries) is never reached."""
    import types

    from embinit.cli import main
    from live_server import free_port
    stub = types.ModuleType("datasets")
    stub.load_dataset = lambda *a, **k: pytest.fail("datasets.load_dataset was called")
    monkeypatch.setitem(sys.modules, "datasets", stub)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert main(list(TRAIN)) == 2
    err = capsys.readouterr().err
    assert "127.0.0.1 cannot be reached" in err and "--data-dir" in err
