"""On-disk cache of aligned source rows (`Aligned`), keyed by the source's identity and the vocabulary.

Key: source kind, source identity (a file's name + size + content sha256; a model folder's files; a hub
id), the vocabulary fingerprint, the lowercase flag and a format version. Entries are `.pt` files under
`cache_dir/aligned/`, written atomically. A corrupt entry is ignored and rebuilt.
Default location: `$EMBINIT_CACHE_DIR`, else `~/.cache/embinit`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import torch

from embinit.cache_root import cache_root
from embinit.trusted import escapes
from embinit.init.aligned import Aligned

# 2: `Aligned.duplicates`; and entries of files that version 1 read but the checks now refuse (a header's N
# that the rows disagree with, a truncated binary file read up to the last needed word) are not reused
FORMAT_VERSION = 2


def default_cache_dir() -> Path:
    return cache_root()


def file_identity(path: str | Path, cache_dir=None) -> dict:
    """The file's content (sha256, memoized per path/size/mtime: embinit.content_hash), not its path:
    an entry made on one node is valid on another with the same file."""
    from embinit.content_hash import file_digest
    p = Path(path).expanduser().resolve()
    return {"name": p.name, "size": p.stat().st_size, "sha256": file_digest(p, cache_dir)}


def entry_path(cache_dir: str | Path, key: dict) -> Path:
    blob = json.dumps({**key, "format": FORMAT_VERSION}, sort_keys=True, default=str)
    return Path(cache_dir).expanduser() / "aligned" / f"{hashlib.sha256(blob.encode()).hexdigest()[:32]}.pt"


def load_entry(path: Path) -> Aligned | None:
    if not path.is_file():
        return None
    try:
        return Aligned.from_dict(torch.load(path, weights_only=True))
    except Exception:  # any unreadable entry is simply rebuilt
        return None


def save_entry(path: Path, aligned: Aligned) -> None:
    if escapes(path.parent):  # a cache folder swapped for a symlink out of the trusted roots
        return
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(aligned.to_dict(), tmp)
        os.replace(tmp, path)
    except BaseException as e:   # stopped mid-write too (a stopped warm-up's SystemExit, Ctrl-C): no half entry
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not isinstance(e, OSError):
            raise
        # an OSError: a read-only cache location only costs speed
