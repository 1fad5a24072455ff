"""The first `make run` installs for minutes: it shows pip's progress and says each step (issue 22 item 12)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_first_install_shows_its_steps_and_pips_progress(tmp_path):
    # -n: print the recipe a fresh machine (no venv yet) would run, run nothing
    out = subprocess.run(["make", "-n", "install", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.splitlines()
    pips = [ln for ln in out if " -m pip install" in ln]
    assert len(pips) == 3 and not [ln for ln in pips if " -q" in ln.split("install", 1)[1]]
    steps = [ln for ln in out if ln.startswith("echo \"[make] ")]
    assert [s.split()[2] for s in steps[:4]] == ["1/4", "2/4", "3/4", "4/4"]
    # each step is announced before its command runs
    assert out.index(steps[2]) < out.index(pips[1]) and "torch" in pips[1]
