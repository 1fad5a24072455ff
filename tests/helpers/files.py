"""Small files the tests write."""
from __future__ import annotations

from pathlib import Path


def write(path: Path, lines) -> None:
    """`lines`, each ended by a newline, into `path` (its folders made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
