"""A Hugging Face hub cache as huggingface_hub leaves it after a download, built from bytes: blobs named by
their content, each snapshot's files linking to them, refs naming commits."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def repo_folder(cache: Path, repo_id: str, kind: str = "dataset") -> Path:
    return cache / f"{kind}s--{repo_id.replace('/', '--')}"


def snapshot(cache: Path, repo_id: str, commit: str, files: dict[str, bytes], kind: str = "dataset",
             ref: str | None = None) -> Path:
    """Snapshot `commit` of repository `repo_id` holding `files` ({path in the repository: bytes}); `ref`
    (e.g. "main") is written to name it. Returns the repository's cache folder."""
    repo = repo_folder(cache, repo_id, kind)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    if ref is not None:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return repo
