"""The committed GPU run store (docs/reproduction/runs, issue 19) stays readable by this version of
embinit from any checkout, and the numbers the documents quote from it are the ones it holds. The store
is copied first: reading it must not change the committed file."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest

from embinit.cli import main

pytestmark = pytest.mark.slow   # MLflow reads a SQLite store

REPO = Path(__file__).resolve().parents[1]
STORE = REPO / "docs" / "reproduction" / "runs"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_committed_gpu_store_reads_back_the_quoted_numbers(tmp_path, capsys):
    before = _digest(STORE / "mlflow.db")
    copy = tmp_path / "elsewhere" / "runs"
    shutil.copytree(STORE, copy)
    uri = f"sqlite:///{copy}/mlflow.db"
    out = tmp_path / "reproduction.md"
    assert main(["reproduction", "--inputs", "gpu", "--tracking-uri", uri, "--out", str(out)]) == 0
    text = out.read_text()
    row = re.search(r"^\| Xavier \| 37\.3 \(0\.4\) \| 11\.7 \| (\S+) \((\S+)\) \| (\d+) \| "
                    r"\[(\S+), (\S+)\] \| (\S+) \|", text, re.M)
    assert row, "no Xavier row in the GPU document's Table 1"
    mean, sd, n, lo, hi, epoch = row.groups()
    quoted = (f"test BLEU {mean} (σ {sd}), 95% CI [{lo}, {hi}], best epoch {epoch}, against the paper's "
              "37.3 (0.4)")
    for doc in ("docs/reproduction/preamble.md", "docs/reproduction.md"):
        assert quoted in " ".join((REPO / doc).read_text().split()), doc
    assert n == "4" and "**multi30k, Xavier only" in text
    assert "NVIDIA H200" in text and "spec hash `" in text and "(missing" not in text   # its spec.yaml was read
    assert _digest(STORE / "mlflow.db") == before
