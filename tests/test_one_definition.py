"""Vocabularies spelled once, so that their readers cannot drift apart:

- the statuses of a trial with a result (finished, diverged), `records.RESULT`: a reader that writes the
  pair out again drifts from the others when a status is added or renamed (the report, the sweep's
  counts, the service's counts and the dry run would disagree on what has a result);
- the schemes of a store kept in a SQL database, `store_check.DATABASES` (SQLite and the
  `SERVER_DATABASES`): `prepare_store` (creates and upgrades) and `require_store` (only reads) must agree
  on which stores are databases."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import embinit.tracking.records as records

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
    assert [f"{p}:{n}" for p, n in found if p != "embinit/tracking/records.py"] == []   # each one reads records.RESULT
    assert len(found) == 1 and set(records.RESULT) == {"finished", "diverged"}


def _scheme_lists(path: Path) -> list[int]:
    """Lines of `path` with a tuple, list or set literal that names two database schemes."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
            if {"postgresql", "mysql"} <= names:   # not the dialects with partial indexes (sqlite, postgresql)
                lines.append(node.lineno)
    return lines


def test_the_database_schemes_are_listed_once():
    found = [f"{p.relative_to(ROOT).as_posix()}:{n}" for d in ("embinit", "service")
             for p in sorted((ROOT / d).rglob("*.py")) for n in _scheme_lists(p)]
    assert len(found) == 1 and found[0].startswith("embinit/tracking/store_check.py:"), found


@pytest.mark.parametrize("uri, database, server", [
    ("sqlite:////abs/mlflow.db", True, False), ("postgresql+psycopg://u:p@db:5432/mlflow", True, True),
    ("mysql://h/db", True, True), ("mssql+pyodbc://h/db", True, True), ("http://127.0.0.1:5000", False, False),
    ("https://mlflow.example", False, False), ("file:///tmp/mlruns", False, False), ("databricks://p", False, False)])
def test_a_store_in_a_database_and_one_on_a_database_server(uri, database, server):
    # prepare_store creates or upgrades every database store (SQLite too); require_store and the dry run
    # read a server's database their own way (a SQLite file is read as a file)
    from embinit.tracking.store_check import is_database, is_server_database
    assert (is_database(uri), is_server_database(uri)) == (database, server)
