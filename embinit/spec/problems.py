"""`SpecError`, and pydantic's validation errors turned into the paths a user wrote (`inits[2].transform`,
`search.space.lr[1]`), each with a one-line message."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from embinit.errors import ListedError


class SpecError(ListedError):
    """An invalid spec; `.problems` lists every (path, message), the message joins them on one line (the
    CLI prints one a line, `ListedError.listing`). `.notes`: what was not checked because of them (`model
    sizes not checked until ...`), said last."""

    def __init__(self, problems: list[tuple[str, str]], notes: list[str] | tuple[str, ...] = ()):
        self.problems = list(problems)
        super().__init__(f"invalid experiment spec ({len(self.problems)} problem"
                         f"{'s' if len(self.problems) != 1 else ''}):",
                         [f"{p}: {m}" if p else m for p, m in self.problems], notes)


class InitFieldError(ValueError):
    """An init spec that does not parse, from a spec field validator; `field` is the structured form's
    key at fault (`transform`), which becomes the last part of the problem's path."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class ProblemsError(ValueError):
    """Several problems found by one field validator, each at its own path (`define_tasks.imdb.columns`),
    so each is its own entry of the spec's error (and of the service's 422), not one joined message."""

    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__("; ".join(f"{p}: {m}" for p, m in problems))
        self.problems = list(problems)


_BRANCHES = {"Range", "str", "constrained-str", "int", "float", "bool", "list", "dict"}


def _loc(loc: tuple) -> tuple[str, bool]:
    """(dotted path, whether the error came from one branch of a union type)."""
    out, branch = "", False
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or part in _BRANCHES:
            branch = True  # pydantic names union branches inside locations; users never see them
        else:
            out += f".{part}" if out else str(part)
    return out, branch


def _models(annotation: Any) -> list[type]:
    """The pydantic models an annotation holds (`X`, `X | None`, `list[X]`, `dict[str, X]`, `Annotated[X, ...]`)."""
    from typing import get_args
    from pydantic import BaseModel
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models(arg)]


def _fields_at(model: type | None, loc: tuple) -> list[str]:
    """The field names a key at location `loc` (the unknown key's parent) may take, walking the spec model
    from `model`; [] where the location holds no model (a dict of free keys) or none is given."""
    found = [model] if model is not None else []
    for part in loc:
        if isinstance(part, int):
            continue   # a list's item: the list's models already
        named = [m for m in found if m.__name__ == part]   # a union branch pydantic names by its class
        found = named or [m for m in found for name, f in m.model_fields.items() if part in (name, f.alias)
                          for m in _models(f.annotation)]
    return sorted({f.alias or name for m in found for name, f in m.model_fields.items()})


def _unknown_field(e: dict[str, Any], model: type | None) -> str:
    """An unknown key, with the valid one closest to it (a typo), else the valid ones."""
    from embinit.errors import did_you_mean
    key = e["loc"][-1]
    valid = _fields_at(model, tuple(e["loc"][:-1]))
    hint = did_you_mean(str(key), valid) if valid else ""
    if not hint and "defaults" in valid:   # the spec's top level: a hyperparameter (or a typo of one) there
        from embinit.config import HYPERPARAMETERS
        from embinit.errors import closest
        # closer than a valid name's hint needs: a key of no meaning here (`foo`) is not taken for `oov`
        name = key if key in HYPERPARAMETERS else closest(str(key), HYPERPARAMETERS, cutoff=0.8)
        if name:
            how = (f"set per task (tasks: [{{task: ..., {name}: ...}}]) or for every task under defaults "
                   f"(defaults: {{{name}: ...}})")
            return (f"unknown field {key!r}: a hyperparameter is {how}" if name == key else
                    f"unknown field {key!r}; did you mean the hyperparameter {name!r}? It is {how}")
    return f"unknown field {key!r}" + (hint or (f"; valid: {valid}" if valid else ""))


def _message(e: dict[str, Any], model: type | None = None) -> str:
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        return _unknown_field(e, model)
    if e["type"] != "value_error" and not isinstance(e.get("input"), (dict, list, type(None))):
        return f"{msg}, got {e['input']!r}"
    return msg


def problems_of(err: ValidationError, model: type | None = None) -> list[tuple[str, str]]:
    """Every (path, message) of a validation error, without a union's noise; `model`, the pydantic model
    validated, names the valid key closest to an unknown one."""
    found = []
    for e in err.errors():
        path, branch = _loc(e["loc"])
        several = getattr((e.get("ctx") or {}).get("error"), "problems", None)
        if isinstance(several, list):
            found += [(p, m, False) for p, m in several]
            continue
        field = getattr((e.get("ctx") or {}).get("error"), "field", None)
        if field:
            path = f"{path}.{field}"
        last = e["loc"][-1] if e["loc"] else ""
        at_branch = branch and isinstance(last, str) and ("[" in last or last in _BRANCHES)
        found.append((path, _message(e, model), at_branch and e["type"].endswith("_type")))
    # A union's "wrong type" error is noise when another branch explains the problem at the same path.
    explained = {p for p, _, noise in found if not noise}
    out = [(p, m) for p, m, noise in found
           if not (noise and any(q == p or q.startswith((p + ".", p + "[")) for q in explained))]
    return list(dict.fromkeys(out))


def as_written(problems: list[tuple[str, str]], data: dict[str, Any]) -> list[tuple[str, str]]:
    """Paths as the user wrote the init: `inits[2]` for a shorthand, `inits[2].transform` for a
    structured spec whose transform is wrong (not the internal `inits[2].tgt.transform`)."""
    raw = data.get("inits") if isinstance(data.get("inits"), list) else []
    out = []
    for path, msg in problems:
        m = re.match(r"^inits\[(\d+)\]\.(tgt|src)(.*)$", path)
        if m and int(m.group(1)) < len(raw):
            entry = raw[int(m.group(1))]
            written = isinstance(entry, dict) and ({"tgt", "src"} & set(entry))
            path = path if written else f"inits[{m.group(1)}]{m.group(3)}"
        out.append((path, msg))
    return out
