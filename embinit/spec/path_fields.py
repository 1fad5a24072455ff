"""The spec's path fields: which keys name files, `${VAR}` expansion and `./x` relative to the spec file.

`DATA_KEYS` and `PRETRAINED_KEYS` are the keys that name files wherever they appear in a spec (top
level, per task, per init, in `analyses`), declared in embinit.path_keys; the service confines exactly
these (service/paths.py), `paths(data)` lists their values in a spec's data.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ValidationInfo

from embinit.path_keys import DATA_KEYS, PATH_KEYS, PRETRAINED_KEYS

__all__ = ["DATA_KEYS", "PATH_KEYS", "PRETRAINED_KEYS", "PathStr", "expand_env", "format_loc", "paths",
           "spec_path"]

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(value: str | None) -> str | None:
    """`${VAR}` -> its value; an unset variable raises ValueError (reported with the field's path)."""
    if value is None:
        return None
    missing = [m for m in _ENV.findall(value) if m not in os.environ]
    if missing:
        raise ValueError(f"environment variable {missing[0]} is not set (needed by {value!r}); "
                         f"export {missing[0]}=... or write the path out")
    return _ENV.sub(lambda m: os.environ[m.group(1)], value)


def spec_path(value: str | None, info: ValidationInfo | None = None) -> str | None:
    """A path field: `${VAR}` expanded; `./x` and `../x` taken relative to the spec file's folder when
    the spec came from a file (like docker-compose), so a spec travels with its data."""
    value = expand_env(value)
    base = (info.context or {}).get("base_dir") if info is not None and info.context else None
    if value is not None and base is not None and value.startswith(("./", "../")):
        return str((Path(base) / value).resolve())
    return value


def _path_field(value: str, info: ValidationInfo) -> str | None:
    return spec_path(value, info)


# A path field: `${VAR}` expanded, `./x` relative to the spec file's folder.
PathStr = Annotated[str, AfterValidator(_path_field)]


def format_loc(loc: tuple) -> str:
    """('inits', 2, 'transform') -> 'inits[2].transform'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def paths(data: object, loc: tuple = ()) -> list[tuple[str, str]]:
    """(field path, value) of every string under a PATH_KEYS key in a spec's data, wherever it is: a
    `{source: path}` map under a pretrained key, an axis or search list of paths, `extras` included."""
    if isinstance(data, list):
        return [found for i, item in enumerate(data) for found in paths(item, loc + (i,))]
    if not isinstance(data, dict):
        return []
    out = []
    for key, value in data.items():
        here = loc + (key,)
        if key in PATH_KEYS and isinstance(value, str):
            out.append((format_loc(here), value))
        elif key in PATH_KEYS and isinstance(value, (dict, list)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            out += [(format_loc(here + (k,)), v) for k, v in items if isinstance(v, str)]
        else:
            out += paths(value, here)
    return out
