"""The Makefile's install step: CPU torch from PyTorch's CPU index (PyPI's Linux torch wheel is the CUDA
build, several GB), its dependencies with the project's install."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def install_commands(tmp_path, *args) -> list[str]:
    """What `make install` would run for a new virtual environment (make -n: printed, not run)."""
    out = subprocess.run(["make", "-n", "install", f"VENV={tmp_path / 'venv'}", *args], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if " install " in line and "pip" in line]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_torch_comes_from_the_cpu_index_without_its_dependencies(tmp_path):
    torch_step, project = [c for c in install_commands(tmp_path) if "upgrade pip" not in c]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in torch_step
    assert "--no-deps" in torch_step and '"torch==2.13.0"' in torch_step
    assert '-e ".[test]"' in project and "--no-deps" not in project   # torch's own dependencies come here
    cuda = [c for c in install_commands(tmp_path, "TORCH_INDEX=https://download.pytorch.org/whl/cu126",
                                        "TORCH_SPEC=torch==2.13.0+cu126") if "torch==" in c]
    assert cuda and "--extra-index-url https://download.pytorch.org/whl/cu126" in cuda[0]
    plain = [c for c in install_commands(tmp_path, "TORCH_INDEX=") if "torch==" in c]
    assert plain and "index-url" not in plain[0]   # pip's own indexes (a local wheel folder)
