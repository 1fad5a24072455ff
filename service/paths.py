"""Which files a spec submitted over HTTP may name: only those inside the configured roots.

A spec's data and pretrained paths are rewritten to absolute paths inside a root (so a Ray worker with
another working directory finds the same file); absolute paths elsewhere, `..` components, `~`, URLs and
symlinks that lead out of a root are refused with one message per offending value. A pretrained value
that is no file under a root is kept only if it has the shape of a Hugging Face hub id (`org/name`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from embinit.errors import did_you_mean
from embinit.path_keys import DATA_KEYS, NOT_A_FILE, PATH_KEYS, PRETRAINED_KEYS  # the keys that name files
from embinit.spec.path_fields import format_loc
from embinit.tasks.tokenization import TOKENIZERS

# `org/name`, pinned to a revision (`@<commit, tag or branch>`, embinit.hf_cache) or not
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?"
                    r"(@(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_./-]{0,254})?$")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")   # an MLflow run id (analyses.similarity.reference)
# What a tokenizer value may name besides a file or hub id: "auto" (TrialConfig.tokenizer) and the registry.
TOKENIZER_NAMES = ("auto", *TOKENIZERS)
# What a pretrained-root value that names no file under a root may be instead, per key (NOT_A_FILE,
# embinit.path_keys): a hub id (checked at submit by service.hub), a tokenizer name or hub id, an MLflow
# run id, or nothing (a checkpoint).


def _other(value: str, kind: str | None, shown: str) -> tuple[str | None, str | None]:
    """A value that is no file under a root: kept when it has the shape `kind` allows, else the problem."""
    if kind == "tokenizer" and value in TOKENIZER_NAMES:
        return value, None
    # A hub id must not also name a file beside the process (a worker could read it as a path).
    if kind in ("hub id", "tokenizer") and HUB_ID.match(value) and not Path(value).exists():
        return value, None
    if kind == "run id" and RUN_ID.match(value):
        return value, None
    if kind == "tokenizer":
        return None, (f"{value!r} is neither a file inside {shown}, one of {list(TOKENIZER_NAMES)} nor a hub id "
                      f"like 'org/model'{did_you_mean(value, TOKENIZER_NAMES)}")
    other = {"hub id": " nor a hub id like 'org/model'", "run id": " nor an MLflow run id (32 hex digits)"}
    return None, f"{value!r} is neither a file inside {shown}{other.get(kind, '')}"


def _inside(path: Path, roots: list[Path]) -> Path | None:
    real = Path(os.path.realpath(path))
    for root in roots:
        if real.is_relative_to(Path(os.path.realpath(root))):
            return real
    return None


def _check(value: str, roots: list[Path], kind: str, allow_hub_id: bool | str | None) -> tuple[str | None, str | None]:
    """(rewritten value, None) or (None, problem). `allow_hub_id`: False for data paths (which may not
    exist yet), else what a value naming no file may be instead (`NOT_A_FILE`; True: a hub id)."""
    shown = ", ".join(str(r) for r in roots) or "(none configured)"
    try:
        return _confine(value, roots, kind, allow_hub_id, shown)
    except OSError as e:   # a name no filesystem takes (too long, a component too long): the user's value
        short = value if len(value) <= 60 else f"{value[:40]}...({len(value)} characters)"
        return None, f"{short!r} is not a usable {kind} path ({e.strerror or e})"


def _confine(value: str, roots: list[Path], kind: str, allow_hub_id: bool | str | None,
             shown: str) -> tuple[str | None, str | None]:
    if "\x00" in value or "://" in value or value.startswith("~") or value.startswith("file:"):
        return None, f"{value!r} is not a plain path; {kind} paths must lie inside {shown}"
    parts = PurePosixPath(value.replace("\\", "/")).parts
    if ".." in parts:
        return None, f"{value!r} contains '..'; {kind} paths must lie inside {shown}"
    if os.path.isabs(value):
        real = _inside(Path(value), roots)
        if real is None:
            return None, f"{value!r} is outside the allowed {kind} roots {shown}"
        if allow_hub_id is not False and not real.exists():   # a pretrained file is read, never made
            return None, f"{value!r} does not exist"
        return str(real), None
    for root in roots:
        candidate = Path(root) / value
        if candidate.exists():
            real = _inside(candidate, roots)
            if real is None:
                return None, f"{value!r} leads outside the allowed {kind} roots {shown} (symlink)"
            return str(real), None
    if allow_hub_id is not False:
        return _other(value, "hub id" if allow_hub_id is True else allow_hub_id, shown)
    if not roots:
        return None, f"{value!r}: this service accepts no {kind} paths (no roots configured)"
    # Not there yet (a folder the trial creates): where it will really land, once the symlinks on the
    # way are followed, must still be inside a root.
    real = _inside(Path(roots[0]) / value, roots)
    if real is None:
        return None, f"{value!r} leads outside the allowed {kind} roots {shown} (symlink)"
    return str(real), None


def confine_paths(data: Any, data_roots: list[Path], pretrained_roots: list[Path],
                  loc: tuple = ()) -> tuple[Any, list[str]]:
    """A copy of the spec dict `data` with its path fields rewritten, and the problems found (each
    prefixed by its location, e.g. `inits[1].pretrained: ...`)."""
    problems: list[str] = []
    if isinstance(data, list):
        out = []
        for i, item in enumerate(data):
            new, probs = confine_paths(item, data_roots, pretrained_roots, loc + (i,))
            out.append(new)
            problems += probs
        return out, problems
    if not isinstance(data, dict):
        return data, problems
    out = {}
    for key, value in data.items():
        here = loc + (key,)
        if isinstance(value, dict) and key in PRETRAINED_KEYS:  # {source name: path}
            value = {k: v for k, v in value.items()}
            for name, path in list(value.items()):
                if isinstance(path, str):
                    new, problem = _check(path, pretrained_roots, "pretrained", allow_hub_id=True)
                    if problem:
                        problems.append(f"{format_loc(here + (name,))}: {problem}")
                    value[name] = new if new is not None else path
            out[key] = value
        elif isinstance(value, list) and key in PATH_KEYS:  # an axis or search space
            out[key] = []
            for i, item in enumerate(value):
                new, probs = confine_paths({key: item}, data_roots, pretrained_roots, here[:-1])
                out[key].append(new[key])
                problems += [p.replace(format_loc(here), format_loc(here + (i,)), 1) for p in probs]
        elif isinstance(value, str) and key in PATH_KEYS:
            is_data = key in DATA_KEYS
            new, problem = _check(value, data_roots if is_data else pretrained_roots,
                                  "data" if is_data else "pretrained",
                                  allow_hub_id=False if is_data else NOT_A_FILE[key])
            if problem:
                problems.append(f"{format_loc(here)}: {problem}")
            out[key] = new if new is not None else value
        else:
            out[key], probs = confine_paths(value, data_roots, pretrained_roots, here)
            problems += probs
    return out, problems

