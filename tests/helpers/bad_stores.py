"""Files given as an MLflow store that are none (or an old one), and what a test compares before and after:
a command must refuse each with a message and leave it exactly as it was."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


def notes_db(path: Path) -> Path:
    """Another application's SQLite database: one `notes` table with a row."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("INSERT INTO notes (text) VALUES ('keep me')")
    conn.commit()
    conn.close()
    return path


def state_db(path: Path) -> Path:
    """The API's own state database (its `experiments` table is not MLflow's)."""
    from service.db import make_engine
    make_engine(f"sqlite:///{path}").dispose()
    return path


def random_bytes(path: Path) -> Path:
    path.write_bytes(os.urandom(8192))
    return path


def copy_store(src: Path, dst: Path) -> Path:
    """A consistent copy of a SQLite store (what its write-ahead log holds included), in rollback mode."""
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    a.backup(b)
    b.execute("PRAGMA journal_mode=DELETE")
    a.close()
    b.close()
    return dst


def truncated(src: Path, dst: Path) -> Path:
    """The first third of a copy of the store at `src` (a copy cut short)."""
    data = copy_store(src, dst).read_bytes()
    dst.write_bytes(data[:len(data) // 3])
    return dst


def damaged_pages(src: Path, dst: Path) -> Path:
    """A copy of the store at `src` whose schema reads but whose `tags` and `runs` tables' first pages are
    garbage: damage SQLite finds only when a query reaches those pages ("database disk image is malformed")."""
    copy_store(src, dst)
    conn = sqlite3.connect(dst)
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = [r[0] for r in conn.execute("SELECT rootpage FROM sqlite_master WHERE name IN ('tags', 'runs')")]
    conn.close()
    data = bytearray(dst.read_bytes())
    for root in roots:   # pages count from 1
        data[(root - 1) * page:root * page] = b"\xff\xee" * (page // 2)
    dst.write_bytes(bytes(data))
    return dst


def stamped_old(src: Path, dst: Path) -> tuple[Path, str]:
    """A copy of the store at `src` whose schema revision is the one before the installed MLflow's head
    (what a read sees of a store an older MLflow wrote); (its path, that revision)."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db import utils

    script = ScriptDirectory.from_config(utils._get_alembic_config(""))
    older = script.get_revision(script.get_current_head()).down_revision
    copy_store(src, dst)
    conn = sqlite3.connect(dst)
    conn.execute("UPDATE alembic_version SET version_num = ?", (older,))
    conn.commit()
    conn.close()
    return dst, older


def snapshot(path: Path) -> tuple[bytes, list[str], list[str]]:
    """(the file's bytes, its tables, the files beside it): what must not change."""
    tables = []
    if path.read_bytes()[:16] == b"SQLite format 3\x00":
        try:
            conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)   # makes no -wal, -shm beside it
            tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
            conn.close()
        except sqlite3.DatabaseError:   # a damaged file: its bytes tell
            pass
    return path.read_bytes(), tables, sorted(p.name for p in path.parent.iterdir())


def checkpoint_cut_short(src: Path, dst: Path) -> Path:
    """A copy of the store at `src` as a checkpoint cut short by a full disk leaves it (seen after a sweep
    on a full tmpfs): its write-ahead log holds commits that grew the database, and the main file's first
    page already gives the grown size while the pages that extend it never reached the disk. Healthy:
    SQLite reads those pages from the log (`PRAGMA integrity_check` says ok)."""
    copy_store(src, dst)
    conn = sqlite3.connect(dst)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")   # the commits below stay in the log
    conn.execute("CREATE TABLE embinit_filler (b BLOB)")
    conn.execute("INSERT INTO embinit_filler VALUES (zeroblob(200000))")
    conn.commit()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    log = Path(f"{dst}-wal").read_bytes()   # read while the connection keeps the log
    conn.close()   # checkpoints and removes the log: both are put back below, as the disk held them
    Path(f"{dst}-wal").write_bytes(log)
    size = dst.stat().st_size
    page = int.from_bytes(dst.read_bytes()[16:18], "big")
    head = bytearray(dst.read_bytes()[:size - 20 * page])   # the extending pages never written
    head[28:32] = pages.to_bytes(4, "big")   # the header already says the grown size
    dst.write_bytes(bytes(head))
    return dst
