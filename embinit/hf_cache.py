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
