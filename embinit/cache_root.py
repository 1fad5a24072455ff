"""The root folder of embinit's on-disk caches, shared by all of them (task data in `tasks/`, aligned
pretrained rows in `aligned/`, file digests in `digests/`, marks of files the spec's checks found sound in
`checked/`, trial checkpoints in `checkpoints/`): the
`cache_dir` given (a spec's or a flag's), else `$EMBINIT_CACHE_DIR`, else `~/.cache/embinit`."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root(cache_dir: str | Path | None = None) -> Path:
    return Path(cache_dir or os.environ.get("EMBINIT_CACHE_DIR") or Path.home() / ".cache" / "embinit").expanduser()
