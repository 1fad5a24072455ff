"""A trial's file inputs by content: the identity `TrialConfig.key()` uses for fields that name files.

A trial reads its pretrained vectors, its data folder, a `best.pt` to start from and a tokenizer folder
from paths. Keyed by those paths, the same file moved or copied elsewhere looked like a new trial and
was trained again, although every cache below the trial (task data, aligned rows) is keyed by content.
`content_id(value)` gives `sha256:<hex>` for a value that names an existing local file or folder, so a
key holds the bytes a trial reads, not where they lie; the path stays in the trial's config (its MLflow
params) for provenance.

What counts as a local path: a value written as one (absolute, `./`, `../` or `~`, the rule
`embinit.spec.check_local_paths` uses) that exists. Anything else (a hub id such as
`bert-base-uncased`, a tokenizer name such as `spacy`, a path that does not exist here) stays as
written. A folder's identity is the sha256 of its files' relative paths and digests (names starting
with `.` skipped: `.git`, editor and OS leftovers), so a copied model or data folder keeps its trials.

Cost: every file is hashed once per version. `content_hash.file_digest` remembers digests on disk per
`content_hash.stamp` (path, size, mtime, inode, ctime) under the cache root; on top of that this process
remembers them by the same stamp,
so planning a spec of N trials stats its files N times and reads them at most once.

Folders embinit writes into rather than reads (a cache, a checkpoint or plot folder): `folder_problem`
says why a path cannot be one, the one rule of the spec check and the CLI's `--out`/`--plot`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from embinit.content_hash import file_digest, stamp
from embinit.path_keys import FILE_FIELDS  # TrialConfig fields that may name a file or folder a trial reads
PREFIX = "sha256:"

_memo: dict[tuple, str] = {}  # stamp of a file or folder -> its content id, for this process


def written_as_path(value: object) -> bool:
    """Whether `value` is written as a local path (absolute, `./`, `../` or `~`), whether or not it exists."""
    return isinstance(value, str) and value.startswith(("/", "./", "../", "~"))


def local_path(value: object) -> Path | None:
    """The existing local file or folder `value` names, or None (not a path, or nothing there)."""
    if not written_as_path(value):
        return None
    path = Path(value).expanduser()
    return path.resolve() if path.exists() else None


def folder_problem(path: Path, value: str) -> str | None:
    """Why `path` (written `value`) cannot be a folder embinit writes into, making it when missing: it is
    something else, or the nearest part of it that exists is no folder or is not writable; else None."""
    if path.is_dir():
        return None if os.access(path, os.W_OK | os.X_OK) else f"{value!r} is a folder this user cannot write to"
    if path.is_symlink() and not path.exists():
        return f"{value!r} is a symbolic link to {os.readlink(path)!r}, which does not exist"
    if path.exists():
        return f"{value!r} is a file, not a folder" if path.is_file() else f"{value!r} is not a folder"
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is None:
        return None
    if not parent.is_dir():
        return f"{value!r} cannot be made: {str(parent)!r} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{value!r} cannot be made: this user cannot write to {str(parent)!r}"
    return None


def content_id(value: object) -> str | None:
    """`sha256:<hex>` of the file or folder `value` names; None when it names none (see `local_path`)."""
    path = local_path(value)
    if path is None:
        return None
    return PREFIX + (_folder_digest(path) if path.is_dir() else _file_digest(path))


def content_ids(config: dict) -> dict[str, str]:
    """FILE_FIELDS name -> content id, for each of `config`'s values that names a local file or folder:
    what its key holds of them (a trial run tags them, `embinit.sha256.<field>`)."""
    ids = {name: content_id(config.get(name)) for name in FILE_FIELDS}
    return {name: cid for name, cid in ids.items() if cid is not None}


def key_values(config: dict) -> dict:
    """`config` with each FILE_FIELDS value that names a local file or folder replaced by its content id."""
    return {**config, **content_ids(config)}


def _file_digest(path: Path) -> str:
    key = stamp(path, path.stat())
    if key not in _memo:
        _memo[key] = file_digest(path)
    return _memo[key]


def _folder_digest(root: Path) -> str:
    files = _files(root)
    key = (str(root), tuple(stamp(path, st) for _, path, st in files))
    if key not in _memo:
        h = hashlib.sha256()
        for rel, path, _ in files:
            h.update(f"{rel}\0{_file_digest(path)}\n".encode())
        _memo[key] = h.hexdigest()
    return _memo[key]


def _files(root: Path) -> list[tuple[str, Path, os.stat_result]]:
    """(relative path, path, stat) of every file under `root`, sorted, hidden names skipped."""
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            path = Path(folder) / name
            out.append((path.relative_to(root).as_posix(), path, path.stat()))
    return out
