"""The test suite's own set-up: `make test` spreads the files over pytest-xdist workers, but the GPU machine's
pytest has no xdist (bench/gpu_stretch.sh runs `python3 -m pytest -m gpu tests/test_gpu.py` there), so
nothing in pyproject's options or the conftest may need it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_tests_are_collected_by_a_pytest_without_xdist():
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider",
                           "--collect-only", "-q", "-m", "gpu", "tests/test_gpu.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tests/test_gpu.py::" in done.stdout
