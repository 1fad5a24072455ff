"""Marks on disk that a check found input files sound, so a later process does not read them again.

The spec's checks read every vector file and data file a spec names through (embinit.spec.vector_files,
embinit.tasks.load.check_files): a 2.2M-word GloVe file or MNLI's 300 MB train.tsv on every
`embinit run` (a rerun of a finished spec too), dry run and service process. A check that finds nothing
leaves a mark `<cache root>/checked/<name>`, the name a digest of what was checked: the files' content
(`content_hash.file_digest`, the sha256 the trial keys compute anyway) and the other inputs of the
check, and of embinit's own source (`source_digest`), so a mark made by other code is not trusted. Other
bytes, or other code, are read again. Only a sound result is marked (a problem names the file's path).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from embinit.cache_root import cache_root
from embinit.content_hash import file_digest
from embinit.trusted import escapes


@lru_cache(maxsize=1)
def source_digest() -> str:
    """sha256 of every .py file of the embinit package (~1.5 MB, a few ms once per process): the version of
    the code that checked. Read from the files, not imported (a check answered by a mark imports no torch)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(f"{path.relative_to(root).as_posix()}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def mark_for(kind: str, files: list[Path], inputs: object = None) -> Path | None:
    """Where the mark of a sound check `kind` of `files` (their content, in order) with `inputs` (what
    else the check depends on, JSON-able) lies; None when it cannot be told (an unreadable file)."""
    try:
        blob = json.dumps([kind, [file_digest(f) for f in files], inputs, source_digest()], default=str)
        return cache_root() / "checked" / f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:40]}"
    except OSError:
        return None


def marked(mark: Path | None) -> bool:
    return mark is not None and mark.is_file()


def make(mark: Path | None) -> None:
    """Leave `mark` (nothing for None or a cache folder swapped for a symlink out of the trusted roots)."""
    if mark is None or escapes(mark.parent):
        return
    try:
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
    except OSError:
        pass   # a read-only cache root only costs a read next time
