"""Where Hugging Face keeps its local caches, and whether it is told to stay offline, read from the
environment at call time (huggingface_hub fixes its own constants when it is imported, so a process that
sets HF_HUB_OFFLINE or HF_HOME later, as the service and the tests do, would not be seen)."""

from __future__ import annotations

import os
from pathlib import Path

TRUE = {"1", "on", "yes", "true"}


def set_flag(*names: str) -> str | None:
    """The first of the environment variables `names` that is set to a true value, else None."""
    return next((n for n in names if os.environ.get(n, "").strip().lower() in TRUE), None)


def hf_home() -> Path:
    return Path(os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface")


def hub_cache() -> Path:
    return Path(os.environ.get("HF_HUB_CACHE") or hf_home() / "hub").expanduser()


def datasets_cache() -> Path:
    return Path(os.environ.get("HF_DATASETS_CACHE") or hf_home() / "datasets").expanduser()


def hub_revision(repo_id: str, repo_type: str = "model") -> str | None:
    """The commit of the snapshot of hub repository `repo_id` that loading it by name reads here (its
    `refs/main` in the hub cache, written when it was downloaded), or None when none is cached (a
    dataset `datasets` keeps in its own cache only, say)."""
    ref = hub_cache() / f"{repo_type}s--{repo_id.replace('/', '--')}" / "refs" / "main"
    try:
        commit = ref.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return commit or None
