"""argparse types the subcommands share: a bad value is argparse's one-line usage error (exit 2), found
before any work is done, not a traceback after it (a port out of range, a folder that is a file)."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlparse

from embinit.file_inputs import folder_problem


def port(text: str) -> int:
    """A TCP port, 1-65535."""
    value = _int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {value}")
    return value


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0 (a base, a scale)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def http_url(text: str) -> str:
    """An http(s) URL with a host (`http://127.0.0.1:8000`), without a trailing slash."""
    url = urlparse(text.strip())
    if url.scheme not in ("http", "https") or not url.netloc:
        raise argparse.ArgumentTypeError(f"expected an http(s) URL such as http://127.0.0.1:8000, got {text!r}")
    return text.strip().rstrip("/")


def folder_to_write(text: str) -> str:
    """A folder that exists or can be made (`file_inputs.folder_problem`, the spec check's rule)."""
    if (problem := folder_problem(Path(text).expanduser(), text)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
