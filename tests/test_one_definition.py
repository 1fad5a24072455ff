"""Vocabularies spelled once, so that their readers cannot drift apart:

- the statuses of a trial with a result (finished, diverged), `records.RESULT`: a reader that writes the
  pair out again drifts from the others when a status is added or renamed (the report, the sweep's
  counts, the service's counts and the dry run would disagree on what has a result)."""

from __future__ import annotations

import ast
from pathlib import Path

import embinit.records as records

ROOT = Path(__file__).resolve().parents[1]


def _spelled_out(path: Path) -> list[int]:
    """Lines of `path` with a tuple, list or set of exactly the two statuses, or a sum of
    `.count("finished") + .count("diverged")`."""
    pair = {"finished", "diverged"}
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) == len(pair):
            if all(isinstance(e, ast.Constant) for e in node.elts) and {e.value for e in node.elts} == pair:
                lines.append(node.lineno)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            args = [n.args[0].value for n in (node.left, node.right) if isinstance(n, ast.Call) and n.args
                    and isinstance(n.args[0], ast.Constant)]
            if set(args) == pair:
                lines.append(node.lineno)
    return lines


def test_the_statuses_with_a_result_are_spelled_once():
    found = [(p.relative_to(ROOT).as_posix(), n) for d in ("embinit", "service", "bench")
             for p in sorted((ROOT / d).rglob("*.py")) for n in _spelled_out(p)]
    assert [f"{p}:{n}" for p, n in found if p != "embinit/records.py"] == []   # each one reads records.RESULT
    assert len(found) == 1 and set(records.RESULT) == {"finished", "diverged"}

