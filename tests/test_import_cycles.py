"""Imports among embinit's modules point one way: no cycle, counting the imports inside functions and
those under `if TYPE_CHECKING:` too (a function-level import that closes a cycle only hides it, and an
annotation that names a module above is the same dependency, drawn as a type); a package's `__init__`
counts as the module `embinit.x`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: str = "embinit") -> dict[str, set[str]]:
    """module -> the embinit modules it imports (`from pkg import sub` names the submodule)."""
    files = {_module_name(p): p for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if sub in files else node.module)
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_embinit_modules():
    graph = import_graph()
    assert "embinit.sweep.run" in graph and graph["embinit.sweep.run"]
    assert cycles(graph) == []


def test_type_checking_imports_are_in_the_graph():
    graph = import_graph()   # frame.py imports ReproductionData under `if TYPE_CHECKING:` only
    assert "embinit.reproduction.data" in graph["embinit.reproduction.frame"]


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_the_report_and_the_reproduction_reach_nothing_of_the_sweep():
    """The report and the reproduction read MLflow and draw with embinit.plots, below the sweep."""
    graph = import_graph()
    readers = [m for m in graph
               if m == "embinit.cli.report" or m.startswith(("embinit.report", "embinit.reproduction"))]
    assert {"embinit.reproduction.document", "embinit.report.table", "embinit.report.plots"} <= set(readers)
    reached = {m: sorted(d for d in reachable(graph, m) if d.startswith("embinit.sweep")) for m in readers}
    assert {m: d for m, d in reached.items() if d} == {}


def test_tracking_reaches_nothing_above_it():
    """embinit.tracking writes and reads MLflow for the sweep, the report and the reproduction: it imports
    none of them (nor the CLI), so each of those can use it without the others."""
    graph = import_graph()
    tracking = [m for m in graph if m.startswith("embinit.tracking")]
    assert "embinit.tracking.run_readers" in tracking
    above = ("embinit.report", "embinit.reproduction", "embinit.sweep", "embinit.cli")
    reached = {m: sorted(d for d in reachable(graph, m) if d.startswith(above)) for m in tracking}
    assert {m: d for m, d in reached.items() if d} == {}
