"""Every file of the repository that the documents name exists: a module moved or renamed (embinit's
MLflow modules into embinit/tracking/, the report's into embinit/report/) leaves no stale path behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH = re.compile(r"\b((?:embinit|service|tests|bench|tune_configs|docs)/[A-Za-z0-9_/.-]*[A-Za-z0-9_]"
                  r"\.(?:py|sh|yaml|yml|md|json|txt))\b")


def named_paths(text: str) -> set[str]:
    return {m.group(1) for m in PATH.finditer(text)}


def test_the_checker_reads_paths_as_the_documents_write_them():
    assert named_paths("see `embinit/tracking/records.py`, tests/test_x.py and bench/results/a.json.") == {
        "embinit/tracking/records.py", "tests/test_x.py", "bench/results/a.json"}
    assert named_paths("docs/reproduction/ and embinit.tracking") == set()


def test_every_path_a_document_names_exists():
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = sorted(f"{doc.relative_to(ROOT)}: {p}" for doc in documents for p in named_paths(doc.read_text())
                     if not (ROOT / p).exists())
    assert len(documents) > 3
    assert missing == []
