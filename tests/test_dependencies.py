"""Every third-party module embinit and its service import (at the top or inside a function) belongs to a
distribution pyproject.toml declares, as a dependency or in the extra that needs it. A module that only
came through another package (scipy through the full mlflow: absent with mlflow-skinny, as on the GPU
machine's pack) otherwise works here and fails where that package is slimmer or newer."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN = {"embinit", "service"}


def imported_modules(*folders: str) -> dict[str, set[str]]:
    """{top-level module: the files importing it} over every .py file under `folders`."""
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, str]:
    """{normalized distribution name: where pyproject declares it ("dependencies" or "extra X")}."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    where = {}
    groups = [("dependencies", project["dependencies"]),
              *((f"extra {k}", v) for k, v in project.get("optional-dependencies", {}).items())]
    for group, reqs in groups:
        for req in reqs:
            name = _norm(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
            where.setdefault(name, group)
    return where


def _undeclared(*folders: str, local: set[str] = frozenset()) -> list[str]:
    third = {m: files for m, files in imported_modules(*folders).items()
             if m not in OWN | local and m not in sys.stdlib_module_names}
    owners = importlib.metadata.packages_distributions()
    have = declared()
    problems = []
    for module, files in sorted(third.items()):
        dists = owners.get(module)
        if not dists:
            problems.append(f"{module} (in {sorted(files)[0]}): no installed distribution provides it")
        elif not any(_norm(d) in have for d in dists):
            problems.append(f"{module} (in {sorted(files)[0]}): from {dists}, which pyproject.toml does not declare")
    return problems


def test_every_third_party_import_is_declared_in_pyproject():
    assert {"torch", "mlflow", "scipy"} <= set(imported_modules("embinit"))   # top-level and function imports
    problems = _undeclared("embinit", "service")
    assert not problems, "\n".join(problems)


def test_the_tests_and_benches_imports_are_declared_too():
    """`make test` installs `.[test]`, `make bench` `.[bench]`: what they import beyond their own modules
    must be declared there or above."""
    local = {"tests", "bench", "helpers"} | {p.stem for d in ("tests", "bench") for p in (ROOT / d).rglob("*.py")}
    problems = _undeclared("tests", "bench", local=local)
    assert not problems, "\n".join(problems)
