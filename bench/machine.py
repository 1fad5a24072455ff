"""What every benchmark records of the machine it ran on: the CPU model as `lscpu` names it; and how a
bench keeps its runs: `append_result` adds one to the JSON list in its results file."""

from __future__ import annotations

import json
from pathlib import Path

from embinit.tracking.provenance import cpu_model  # noqa: F401  (the benches' name for it)


def append_result(path: Path, result: dict) -> None:
    """Add `result` to the list of runs kept in the JSON file `path` (made, with its folder, if new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps([*old, result], indent=1) + "\n")


