"""Where a sweep's trial folders live, and the ones a spec no longer plans.

A trial of key K, tracked in MLflow experiment E, keeps its checkpoint folder at
`<root>/checkpoints/<E's folder>/<K>/` (embinit.sweep.resume, which claims and fills it); root is the
spec's `cache_dir` (else `$EMBINIT_CACHE_DIR`, else `~/.cache/embinit`). A finished trial's folder is
removed; an interrupted or failed one's stays, so that running the spec again resumes the trial.

When the spec is edited after an interruption (`epochs: 8` -> `9`, another lr), those trials get new keys
and the old folders are never resumed: each holds `last.pt` and `best.pt` (tens to hundreds of MB).
`retired` lists them (the dry run says how many and how large), `prune` removes them
(`embinit run SPEC --prune-checkpoints`: only those of trials this spec's own sweeps ran, by the tracking
store's records, embinit.cli.dry_run_store; another spec logging to the experiment resumes its own). A
folder whose key another process holds (its `<K>.lock`, the claim of embinit.sweep.resume) is in use: it
is neither counted nor removed (`key_in_use`). The copies mirrored to the operator's object store
(`SweepContext.storage`), also those of keys trained on another node, are listed and removed by
embinit.sweep.store_copies, under the key's lease; the prune does both.

Torch-free and MLflow-free: the dry run reads it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from embinit.cache_root import cache_root
from embinit.checkpoint_files import LAST_INFO, parse_last_info


def checkpoint_root(cache_dir: str | Path | None) -> Path:
    return cache_root(cache_dir).absolute() / "checkpoints"


def store_identity(uri: str) -> str:
    """The tracking store as one name however its path is spelled: a SQLite file by its real path (symlinks,
    `.` and `//` resolved; a URI already so is unchanged, and so is its folder), other stores as given. Two
    spellings of one store made two experiment folders: two sweeps of a spec on it trained every key
    twice (neither saw the other's claims), and a rerun did not find its interrupted trials' checkpoints."""
    from embinit.tracking.store_check import sqlite_path
    path = sqlite_path(uri)
    return uri if path is None else f"sqlite:///{os.path.realpath(path)}"


def experiment_folder(cache_dir: str | Path | None, tracking_uri: str, experiment_id: str) -> Path:
    """The folder of an MLflow experiment's trial folders (experiment ids repeat across tracking stores)."""
    uri, exp_id = store_identity(tracking_uri), str(experiment_id)
    digest = hashlib.sha256(f"{uri}\0{exp_id}".encode()).hexdigest()[:12]
    return checkpoint_root(cache_dir) / f"{re.sub(r'[^A-Za-z0-9_-]', '_', exp_id)[:40]}-{digest}"


@dataclass(frozen=True)
class Retired:
    """A trial folder whose key the spec does not plan: its size and the epoch its `last.pt` holds."""

    key: str
    path: Path
    size: int              # bytes
    epoch: int | None      # None: no readable last.json (a trial stopped before its first epoch)


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


def _epoch(folder: Path, key: str) -> int | None:
    try:
        return parse_last_info((folder / LAST_INFO).read_bytes(), key)
    except OSError:
        return None


def kept_epoch(folder: Path, key: str) -> int | None:
    """The epoch whose checkpoint the trial folder of `key` under `folder` (`experiment_folder`) keeps; None
    when it keeps none (no folder, or no readable `last.json`)."""
    return _epoch(folder / key, key)


def key_lock(path: Path, wait: bool = True) -> int | None:
    """An fd holding an exclusive lock on `path` (created if absent), the file that is there now (not one a
    finishing holder removed while this process waited on it): the claim on a trial key
    (embinit.sweep.resume). `wait=False`: None at once when another process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)   # never through a symlink
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except BlockingIOError:   # only without waiting: a trial trains that key
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def key_in_use(folder: Path, key: str) -> bool:
    """Whether a process holds the lock of `key` in `folder` (`experiment_folder`): a trial trains it."""
    lock = folder / f"{key}.lock"
    if not lock.exists():
        return False
    fd = key_lock(lock, wait=False)
    if fd is None:
        return True
    os.close(fd)
    return False


def retired(folder: Path, planned: set[str]) -> list[Retired]:
    """The trial folders under `folder` (`experiment_folder`) whose key is not in `planned` and that no
    process holds, by key."""
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()):
        if path.name in planned or key_in_use(folder, path.name):
            continue
        out.append(Retired(path.name, path, _size(path), _epoch(path, path.name)))
    return out


def prune(folders: list[Retired]) -> tuple[list[Retired], list[Retired]]:
    """Remove each folder under its key's lock (so no trial can claim it meanwhile); returns (removed,
    skipped: taken by a process since it was listed)."""
    removed, skipped = [], []
    for r in folders:
        lock = r.path.parent / f"{r.key}.lock"
        fd = key_lock(lock, wait=False)
        if fd is None:
            skipped.append(r)
            continue
        try:
            shutil.rmtree(r.path, ignore_errors=True)
            lock.unlink(missing_ok=True)   # while still locked: a waiter sees the inode change, retries
        finally:
            os.close(fd)
        removed.append(r)
    return removed, skipped


def size_text(n: int) -> str:
    """Bytes as people read them: 512 B, 3.4 MB, 1.2 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
