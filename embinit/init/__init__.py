"""Embedding-table initialization: random inits, pretrained sources, transforms and OOV rules.

```python
spec = parse_init_spec("glove+standardize")     # or {"source": "glove", "transform": "standardize"}
res = build_table(spec, vocab, pretrained="glove.6B.50d.txt", seed=0)
res.table, res.label, res.coverage               # float32 [N, D], "GloVe_Xavier", {...}
```
Registries (name -> function / description): `INITS` (random inits), `SOURCES` (pretrained source
families), `TRANSFORMS`, `OOV_RULES`; `DESCRIPTIONS` holds the one-line description of every name.
See `build.py` for the order of operations and `vectors.py` for the file formats.
"""

from embinit.init.build import BuildResult, build_table, load_aligned, resolve_source, source_dim
from embinit.init.oov import OOV_RULES
from embinit.init.random import INITS, xavier_bound, xavier_std
from embinit.init.spec import (OOV_INFO, RANDOM_INITS, SOURCE_FAMILIES, TRANSFORM_INFO, InitSpec,
                               parse_init_spec)
from embinit.init.transforms import TRANSFORMS

# family name -> default location (path / hub id) or None
SOURCES: dict[str, str | None] = {name: entry.default for name, entry in SOURCE_FAMILIES.items()}

DESCRIPTIONS: dict[str, dict[str, str]] = {
    kind: {name: entry.description for name, entry in entries.items()}
    for kind, entries in (("inits", RANDOM_INITS), ("sources", SOURCE_FAMILIES), ("transforms", TRANSFORM_INFO),
                          ("oov_rules", OOV_INFO))
}

__all__ = ["BuildResult", "DESCRIPTIONS", "INITS", "InitSpec", "OOV_RULES", "SOURCES", "TRANSFORMS",
           "build_table", "load_aligned", "parse_init_spec", "resolve_source", "source_dim",
           "xavier_bound", "xavier_std"]
