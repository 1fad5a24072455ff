"""What a spec can ask for: the registered inits and tasks, with descriptions and defaults."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Depends

from embinit.task_registry import DEFINED, TASKS
from service.deps import require_read

router = APIRouter(tags=["catalog"], dependencies=[Depends(require_read)])


@router.get("/inits")
def list_inits() -> dict:
    """Registered random inits, pretrained sources, transforms and OOV rules, with the spec syntax."""
    from embinit.init import DESCRIPTIONS, SOURCES, TRANSFORMS

    return {
        "syntax": "SOURCE[+TRANSFORM]..., e.g. 'xavier', 'glove', 'glove+standardize', 'bert+shuffle'; or "
                  "{source, transform(s), oov, lowercase, pretrained, name}; per side for translation: "
                  "{tgt: ..., src: ...}",
        "inits": [{"name": n, "description": d} for n, d in DESCRIPTIONS["inits"].items()],
        "sources": [{"name": n, "description": d, "default_pretrained": SOURCES.get(n)}
                    for n, d in DESCRIPTIONS["sources"].items()],
        "transforms": [{"name": n, "description": DESCRIPTIONS["transforms"].get(n, "")} for n in TRANSFORMS],
        "oov_rules": [{"name": n, "description": d} for n, d in DESCRIPTIONS["oov_rules"].items()],
    }


@router.get("/tasks")
def list_tasks() -> dict:
    """Registered tasks with their kind, description and default hyperparameters (paper Table 5)."""
    return {"tasks": [{"name": name, "kind": d.kind, "description": d.description, "metric": d.metric,
                       "defaults": {k: v for k, v in dataclasses.asdict(d).items()
                                    if k not in ("kind", "description", "metric")}}
                      for name, d in ((name, t.defaults) for name, t in TASKS.items() if name not in DEFINED)]}
