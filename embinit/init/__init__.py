"""Embedding-table initialization: random inits, pretrained sources, transforms and OOV rules.

```python
spec = parse_init_spec("glove+standardize")     # or {"source": "glove", "transform": "standardize"}
res = build_table(spec, vocab, pretrained="glove.6B.50d.txt", seed=0)
res.table, res.label, res.coverage               # float32 [N, D], "GloVe_Xavier", {...}
```
Registries (name -> function / description): `INITS` (random inits), `SOURCES` (pretrained source
families), `TRANSFORMS`, `OOV_RULES`; `DESCRIPTIONS` holds the one-line description of every name.
See `table.py` for the order of operations and `vectors.py` for the file formats.
"""

import importlib
from typing import Any

from embinit.init.registry import (OOV_INFO, RANDOM_INITS, SOURCE_FAMILIES, TRANSFORM_INFO, InitSpec, InitSpecError,
                               parse_init_spec)

# Names whose modules import torch, loaded on first use: parsing and validating init specs (and so
# validating an experiment spec) never imports torch.
_LAZY = {"BuildResult": "table", "build_table": "table", "load_aligned": "table", "resolve_source": "source_files",
         "source_dim": "source_files", "OOV_RULES": "oov", "INITS": "random", "xavier_bound": "random",
         "xavier_std": "random", "TRANSFORMS": "transforms"}

# family name -> default location (path / hub id) or None
SOURCES: dict[str, str | None] = {name: entry.default for name, entry in SOURCE_FAMILIES.items()}

DESCRIPTIONS: dict[str, dict[str, str]] = {
    kind: {name: entry.description for name, entry in entries.items()}
    for kind, entries in (("inits", RANDOM_INITS), ("sources", SOURCE_FAMILIES), ("transforms", TRANSFORM_INFO),
                          ("oov_rules", OOV_INFO))
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'embinit.init' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"embinit.init.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


__all__ = ["BuildResult", "DESCRIPTIONS", "INITS", "InitSpec", "InitSpecError", "OOV_RULES", "SOURCES",
           "TRANSFORMS", "build_table", "load_aligned", "parse_init_spec", "resolve_source", "source_dim",
           "xavier_bound", "xavier_std"]
