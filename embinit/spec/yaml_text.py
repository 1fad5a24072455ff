"""The one reader of spec YAML text: the safe loader with a key given twice as an error, its JSON twin,
and the one-line message of a YAML error. No pydantic, so the override parser can use it too."""

from __future__ import annotations

from typing import Any

import yaml


def yaml_error(e: yaml.YAMLError, where: str = "") -> str:
    """One line that keeps where the parser stopped: `line 4, column 4: expected <block end>, but found
    ... (while parsing a block collection at line 3, column 3)`; `where` names the file, if any."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or not problem:
        return f"not valid YAML{where}: {(str(e).splitlines() or [type(e).__name__])[0]}"
    text = f"not valid YAML{where} at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, at = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context:
        text += f" ({context}" + (f" at line {at.line + 1}, column {at.column + 1})" if at else ")")
    return text


def given_twice(key: Any, first_line: int | None = None) -> str:
    """The one message for a key given twice in one mapping, from YAML (with the line of the first) or
    from JSON: `'seeds' is given twice (first at line 4)`."""
    shown = repr(key) if len(repr(key)) <= 60 else repr(key)[:57] + "..."
    return f"{shown} is given twice" + (f" (first at line {first_line})" if first_line is not None else "")


class SpecLoader(yaml.SafeLoader):
    """The one reader of spec YAML (`load_spec`, the service's bodies): YAML's safe loader, but a key
    given twice in one mapping is an error (safe_load keeps the last: `seeds: 1` and a later `seeds: 3`
    ran 3 seeds without a word)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, given_twice(key, seen[key].line + 1),
                    key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


MAX_VALUES = 1_000_000   # a spec is a few hundred values; aliases nested 9 deep in 9s expand to 9^9


def not_a_mapping(data: Any, what: str = "the spec") -> str:
    """Why loaded spec data that is no mapping is no spec, in YAML's words (an empty file loads as None:
    "got NoneType" named a Python type, not the empty file)."""
    if data is None:
        return (f"{what} is empty: a spec is a mapping with at least name, tasks and inits (e.g. "
                f"tune_configs/quickstart.yaml)")
    return f"a spec must be a mapping at the top level, got {type(data).__name__}"


def shape_problem(data: Any) -> str | None:
    """What makes loaded spec data unusable whatever its fields: a value that contains itself (a YAML
    alias inside its own anchor, `a: &a [*a]`), or more than MAX_VALUES values once aliases are expanded
    (nested aliases multiply: the walk would not end). None when neither."""
    count, stack = 0, [(data, ())]
    while stack:
        node, parents = stack.pop()
        count += 1
        if count > MAX_VALUES:
            return f"expands to more than {MAX_VALUES:,} values (YAML aliases nested in aliases?)"
        if isinstance(node, (dict, list)):
            if id(node) in parents:
                return "a value contains itself (a YAML alias inside its own anchor, e.g. `a: &a [*a]`)"
            inner = (*parents, id(node))
            stack.extend((child, inner) for child in (node.values() if isinstance(node, dict) else node))
    return None


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads(text, object_pairs_hook=unique_pairs)`: JSON read with `SpecLoader`'s rule, a key
    given twice in one object is a ValueError naming it (json.loads keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(given_twice(key))
        out[key] = value
    return out
