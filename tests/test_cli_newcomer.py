"""Rough edges a newcomer meets in the CLI, run as a user runs them (`python -m embinit ...` in a
subprocess): an invalid YAML spec names its line and column; a missing Multi30k folder fails at once,
offline, naming the `--data-dir` flag."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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
