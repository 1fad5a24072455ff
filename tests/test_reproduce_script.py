"""tune_configs/offline/reproduce.sh before it starts anything (review C8): it needed the venv active (only
its header said so) and named a staging tool outside the repository for its pretrained files. It now
finds the repository's .venv itself, or stops naming what to do, and names every missing input."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tune_configs" / "offline" / "reproduce.sh"


def _run(cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "EMBINIT_DATA_DIR": str(tmp_path / "data"),
           "EMBINIT_ASSETS": str(tmp_path / "assets")}
    return subprocess.run(["bash", str(SCRIPT)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_without_a_venv_it_says_how_to_get_one(tmp_path):
    done = _run(tmp_path, tmp_path)     # not the repository root: no .venv there, none active
    assert done.returncode == 2, done.stderr
    assert "no embinit and ray on PATH nor in" in done.stderr and "make install" in done.stderr


def test_it_finds_the_repository_s_venv_and_names_every_missing_input(tmp_path):
    if not os.access(ROOT / ".venv" / "bin" / "embinit", os.X_OK):
        import pytest
        pytest.skip("this checkout has no .venv")
    done = _run(ROOT, tmp_path)
    assert done.returncode == 2, done.stderr
    for name in ("data/multi30k", "data/sst2", "data/analogy/questions-words.txt", "assets/glove.6B.50d.txt",
                 "assets/all-MiniLM-L6-v2"):
        assert str(tmp_path / name) in done.stderr, done.stderr
    assert "no embinit" not in done.stderr


def test_the_header_says_where_the_pretrained_files_come_from():
    header = SCRIPT.read_text(encoding="utf-8").split("set -euo")[0]
    assert "shared/tools" not in header
    assert "nlp.stanford.edu" in header and "sentence-transformers/all-MiniLM-L6-v2" in header
