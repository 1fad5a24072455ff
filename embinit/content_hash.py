"""Content digests of input files, for cache keys that hold across machines.

A cache entry keyed by a file's path and mtime is worthless on another node (or after a copy); keyed by
the file's sha256 it is valid wherever the same bytes are. Hashing a multi-GB vector file on every trial
would cost seconds, so each digest is remembered under `<cache root>/digests/`, keyed by the file's
`stamp` (resolved path, size, mtime, inode, ctime): a node hashes each file version once. Size and mtime
alone trusted a stale digest for a file replaced by another of its size with the same mtime (`cp -p`,
`rsync -t`, `tar x`, `touch -r`) or written in place with its mtime set back; a replaced file has
another inode and a written one another ctime, which no user can set back. A stale memo can only cause
a re-hash.

`entry_lock(path)` serializes the builders of one cache entry across processes on a node: the first
builds and writes it, the others wait and then read it (N concurrent trials never build it N times).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from contextlib import contextmanager
from pathlib import Path

from embinit.cache_root import cache_root
from embinit.trusted import escapes

CHUNK = 1 << 16


def stamp(path: Path, st: os.stat_result) -> tuple:
    """What tells one version of the file at `path` (resolved) from another without reading it: its size,
    mtime, inode (and device) and ctime. The key of every memo of a file's content or checks."""
    return (str(path), st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_ctime_ns)


def file_digest(path: str | Path, cache_dir=None) -> str:
    """sha256 of the file's bytes (hex), memoized per `stamp` under the cache root."""
    p = Path(path).expanduser().resolve()
    name = "|".join(map(str, stamp(p, p.stat())))
    memo = cache_root(cache_dir) / "digests" / hashlib.sha256(name.encode()).hexdigest()[:32]
    try:
        known = memo.read_text().strip()
        if len(known) == 64:
            return known
    except OSError:
        pass
    h, buf = hashlib.sha256(), bytearray(CHUNK)   # one buffer, read into: a fixed footprint, no bytes per chunk
    view = memoryview(buf)
    with open(p, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    digest = h.hexdigest()
    try:
        if escapes(memo.parent):
            return digest
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}")
        tmp.write_text(digest)
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only cache root only costs a re-hash next time
    return digest


@contextmanager
def entry_lock(entry: Path | None):
    """An exclusive advisory lock on `<cache root>/locks/<folder>-<entry>.lock` for the duration (no-op
    for None or an unwritable folder: the atomic write of the entry still keeps readers safe, only the
    work may be repeated)."""
    if entry is None:
        yield
        return
    lock = entry.parent.parent / "locks" / f"{entry.parent.name}-{entry.name}.lock"
    if escapes(lock.parent):  # a cache folder swapped for a symlink out of the roots: write nothing
        yield
        return
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:
        yield
        return
    with _held(fd):
        yield


@contextmanager
def file_lock(path: Path):
    """An exclusive advisory lock (flock) on `path`, created if missing, for the duration."""
    with _held(os.open(path, os.O_CREAT | os.O_RDWR, 0o644)):
        yield


@contextmanager
def _held(fd: int):
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
