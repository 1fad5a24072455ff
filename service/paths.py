"""Which files a spec submitted over HTTP may name: only those inside the configured roots.

A spec's data and pretrained paths are rewritten to absolute paths inside a root (so a Ray worker with
another working directory finds the same file); absolute paths elsewhere, `..` components, `~`, URLs and
symlinks that lead out of a root are refused with one message per offending value, which names the roots
as absolute paths and the setting that sets them (`EMBINIT_DATA_ROOTS`, `EMBINIT_PRETRAINED_ROOTS`). A
pretrained value that is no file under a root is kept only if it has the shape of a Hugging Face hub id
(`org/name`) and its source may be one (not a file format such as glove: service.hub).
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from embinit.errors import did_you_mean
from embinit.init.registry import SOURCE_FAMILIES
from embinit.path_keys import DATA_KEYS, NOT_A_FILE, PATH_KEYS, PRETRAINED_KEYS  # the keys that name files
from embinit.spec.inits import source_name
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


def _other(value: str, kind: str | None, shown: str, source: str | None = None) -> tuple[str | None, str | None]:
    """A value that is no file under a root: kept when it has the shape `kind` allows, else the problem
    (`kind` "file": a value of the file-format pretrained source `source`, which nothing else may be)."""
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
    if kind == "file":   # a file-format pretrained source (glove, word2vec, ...): never the hub
        return None, (f"{value!r} is no file inside {shown}; a {source} source is read from a file (put it in a "
                      f"pretrained root), it is not a hub id")
    other = {"hub id": "neither a file inside {} nor a hub id like 'org/model'",
             "run id": "neither a file inside {} nor an MLflow run id (32 hex digits)"}
    return None, f"{value!r} is " + other.get(kind, "no file inside {}").format(shown)


def _inside(path: Path, roots: list[Path]) -> Path | None:
    real = Path(os.path.realpath(path))
    for root in roots:
        if real.is_relative_to(Path(os.path.realpath(root))):
            return real
    return None


def roots_shown(roots: list[Path], kind: str) -> str:
    """The roots of `kind` ("data", "pretrained") as a problem names them: absolute, with the setting that
    sets them, so the 422 says where the files must be and how a deployment moves that."""
    setting = f"EMBINIT_{kind.upper()}_ROOTS"
    if not roots:
        return f"(no {kind} roots: setting {setting} is empty)"
    return f"{', '.join(os.path.abspath(r) if isinstance(r, Path) else r for r in roots)} (setting {setting})"


def roots_line(data_roots: list[Path], pretrained_roots: list[Path]) -> str:
    """The roots a spec's files may lie in, as `embinit serve` prints them and the API logs them at start,
    a folder that does not exist marked so (relative defaults resolved in the wrong working directory)."""
    def shown(roots, kind):
        return roots_shown([f"{r} (missing)" if not os.path.isdir(r) else r for r in roots], kind)
    return f"data roots: {shown(data_roots, 'data')}; pretrained roots: {shown(pretrained_roots, 'pretrained')}"


def _check(value: str, roots: list[Path], kind: str, allow_hub_id: bool | str | None,
           source: str | None = None) -> tuple[str | None, str | None]:
    """(rewritten value, None) or (None, problem). `allow_hub_id`: False for data paths (which may not
    exist yet), else what a value naming no file may be instead (`NOT_A_FILE`; True: a hub id; "file":
    nothing, the value of the file-format source `source`)."""
    shown = roots_shown(roots, kind)
    try:
        return _confine(value, roots, kind, allow_hub_id, shown, source)
    except OSError as e:   # a name no filesystem takes (too long, a component too long): the user's value
        short = value if len(value) <= 60 else f"{value[:40]}...({len(value)} characters)"
        return None, f"{short!r} is not a usable {kind} path ({e.strerror or e})"


def _confine(value: str, roots: list[Path], kind: str, allow_hub_id: bool | str | None,
             shown: str, source: str | None) -> tuple[str | None, str | None]:
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
        return _other(value, "hub id" if allow_hub_id is True else allow_hub_id, shown, source)
    if not roots:
        return None, f"{value!r}: this service accepts no {kind} paths {shown}"
    # Not there yet (a folder the trial creates): where it will really land, once the symlinks on the
    # way are followed, must still be inside a root.
    real = _inside(Path(roots[0]) / value, roots)
    if real is None:
        return None, f"{value!r} leads outside the allowed {kind} roots {shown} (symlink)"
    return str(real), None


def _may_be(source: str | None) -> tuple[bool | str, str | None]:
    """What a source's pretrained value naming no file may be instead: a hub id, unless the source is a
    file format (glove, word2vec, fasttext, npy, pretrained), which is only ever read from a file."""
    family = SOURCE_FAMILIES.get(source or "")
    return ("file", source) if family is not None and not family.subword else (True, None)


def _source_of(entry: dict, key: str) -> str | None:
    """The source family an init entry's `pretrained` / `src_pretrained` is for (its `tgt` / `src`, a
    missing `src` being the `tgt`'s; the entry itself in the init library's form `{source: ..., pretrained:
    ...}`), None where the entry names none (a task's or the spec's default)."""
    if "source" in entry and not {"tgt", "src"} & set(entry):
        init = entry
    else:
        init = entry.get("src") or entry.get("tgt") if key == "src_pretrained" else entry.get("tgt")
    try:
        return source_name(init) if isinstance(init, (str, dict)) else None
    except Exception:   # a bad init is its own problem, reported by the spec's check
        return None


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
                    new, problem = _check(path, pretrained_roots, "pretrained", *_may_be(name))
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
            may_be = (False, None) if is_data else _may_be(_source_of(data, key)) \
                if NOT_A_FILE[key] == "hub id" else (NOT_A_FILE[key], None)
            new, problem = _check(value, data_roots if is_data else pretrained_roots,
                                  "data" if is_data else "pretrained", *may_be)
            if problem:
                problems.append(f"{format_loc(here)}: {problem}")
            out[key] = new if new is not None else value
        else:
            out[key], probs = confine_paths(value, data_roots, pretrained_roots, here)
            problems += probs
    return out, problems

