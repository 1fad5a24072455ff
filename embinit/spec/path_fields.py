"""The spec's path fields: which keys name files, `${VAR}` expansion and `./x` relative to the spec file.

`DATA_KEYS` and `PRETRAINED_KEYS` are the keys that name files wherever they appear in a spec (top
level, per task, per init, in `analyses`); the service confines exactly these (service/paths.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ValidationInfo

# Folders a trial reads or writes (snapshot_dir: analyses.similarity writes there).
DATA_KEYS = ("data_dir", "cache_dir", "snapshot_dir")
# Files or hub ids a trial reads (reference: analyses.similarity's fixed table, or an MLflow run id).
PRETRAINED_KEYS = ("pretrained", "src_pretrained", "tokenizer", "reference", "init_from")
PATH_KEYS = DATA_KEYS + PRETRAINED_KEYS

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
