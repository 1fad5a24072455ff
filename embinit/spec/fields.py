"""`SpecFields`: the fields of an `ExperimentSpec`, each validated on its own. Planning and the
cross-field checks read these values; `embinit.spec.experiment` adds the checks and the methods on top,
so neither planning nor the checks import the class that calls them."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from embinit import bounds
from embinit.bounds import field_limits
from embinit.spec.inits import InitEntry
from embinit.spec.models import (DRAWN, NAME_PATTERN, Analyses, Execution, Hyperparams, MlflowSettings, Resources,
                                 Search, TaskEntry, _Strict, as_typed)
from embinit.spec.path_fields import PathStr
from embinit.spec.problems import ProblemsError, problems_of


def drawn_in(data: dict[str, Any]) -> bool:
    """`SpecFields.drawn` of a spec's raw data (a spec stored as a mapping, not validated again)."""
    return (data.get("search") or {}).get("method") == DRAWN


class SpecFields(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    define_tasks: dict[str, dict[str, Any]] | None = None   # tasks of the spec's own (embinit.task_defs)
    tasks: list[TaskEntry] = Field(min_length=1)
    inits: list[InitEntry] = Field(min_length=1)
    seeds: list[Annotated[int, Field(**field_limits("seed"))]] = Field(default_factory=lambda: [0, 1, 2],
                                                                    min_length=1)
    defaults: Hyperparams = Field(default_factory=Hyperparams)
    axes: dict[str, list[Any]] = Field(default_factory=dict)
    search: Search | None = None
    resources: Resources = Field(default_factory=Resources)
    max_concurrent: int | None = Field(None, ge=1)
    retries: int = Field(2, **field_limits("retries"))  # Tune's reruns of a failing trial
    data_dir: PathStr | None = None   # a root with one folder per task (like EMBINIT_DATA_DIR)
    pretrained: PathStr | dict[str, PathStr] | None = None  # a path, or {source family: path}
    cache_dir: PathStr | None = None
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings)
    analyses: Analyses | None = None
    execution: Execution = Field(default_factory=Execution)

    @property
    def drawn(self) -> bool:
        """Whether the search points are drawn at run time (an Optuna search), not planned: the plan
        has no search points, the trial count is a budget, and only the runs say which trials there are.
        (`drawn_in` answers the same of a spec's raw data.)"""
        return self.search is not None and self.search.drawn

    @field_validator("axes")
    @classmethod
    def _typed_axes(cls, axes: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {name: as_typed(name, values) for name, values in axes.items()}

    @field_validator("tasks", mode="before")
    @classmethod
    def _task_shorthand(cls, v):
        return [{"task": t} if isinstance(t, str) else t for t in v] if isinstance(v, list) else v

    @model_validator(mode="before")
    @classmethod
    def _defined_tasks(cls, data):
        """Each task entry of a task in `define_tasks` carries its definition (into its trials' configs)."""
        if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
            return data
        defined = data.get("define_tasks") if isinstance(data.get("define_tasks"), dict) else {}
        # a spec validated before (a stored spec, dumped) holds the definitions it was given: those alone
        written = [i for i, t in enumerate(data["tasks"]) if isinstance(t, dict) and t.get("definition") is not None
                   and t["definition"] != defined.get(t.get("task") if isinstance(t.get("task"), str) else None)]
        if written:
            raise ValueError(f"tasks{written}: a task entry has no 'definition'; define the task in define_tasks")
        if not defined:
            return data
        tasks = [{"task": t} if isinstance(t, str) else t for t in data["tasks"]]
        tasks = [{**t, "definition": defined[t["task"]]}
                 if isinstance(t, dict) and isinstance(t.get("task"), str) and t["task"] in defined else t
                 for t in tasks]
        return {**data, "tasks": tasks}

    @field_validator("define_tasks")
    @classmethod
    def _valid_definitions(cls, v):
        from embinit import task_defs
        problems = [p for name, d in (v or {}).items() for p in task_defs.problems(name, d)]
        problems += [(f"define_tasks.{name}", "a task name is letters, digits, '_', '-' or '.'")
                     for name in v or {} if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}", name)]
        if problems:
            raise ProblemsError(problems)
        return v

    @field_validator("inits", mode="before")
    @classmethod
    def _init_shorthand(cls, v):
        return [InitEntry.shorthand(e) for e in v] if isinstance(v, list) else v

    @field_validator("name", mode="before")
    @classmethod
    def _name_given(cls, v):
        if v is None or (isinstance(v, str) and not v.strip()):
            raise ValueError("must not be empty")
        return v

    @field_validator("seeds", mode="before")
    @classmethod
    def _seed_count(cls, v):
        if v is None or v == [] or (isinstance(v, str) and not v.strip()):
            raise ValueError("must not be empty: give a seed count (seeds: 3) or a list of distinct seeds "
                             "(seeds: [0, 3])")
        if not isinstance(v, (int, list)) or isinstance(v, bool):
            raise ValueError(f"expected a seed count >= 1 or a list of distinct seeds (seeds: 3, seeds: [0, 3]), "
                             f"got {v!r}")
        if isinstance(v, int):
            if v < 1:
                raise ValueError(f"a seed count must be >= 1, got {v}")
            if (problem := bounds.problem("seed_count", v)) is not None:
                raise ValueError(problem)
            return list(range(v))
        return v

    @field_validator("seeds", mode="wrap")
    @classmethod
    def _distinct(cls, v, handler):
        """A seed given twice is a problem beside the list's invalid items (`seeds: [1, 1, a]` named only
        the `a`, and the repeat once that was fixed): every problem of the list, in one error."""
        try:
            seeds = handler(v)
        except ValidationError as e:
            repeat = _repeat(_valid_seeds(v)) if isinstance(v, list) else None
            if repeat is None:
                raise
            raise ProblemsError([(f"seeds{p}", m) for p, m in problems_of(e)] + [("seeds", f"{repeat}, got {v}")]
                                ) from None
        if (repeat := _repeat(seeds)) is not None:
            raise ValueError(f"{repeat}, got {seeds}")
        return seeds


_SEED = TypeAdapter(Annotated[int, Field(**field_limits("seed"))])


def _valid_seeds(items: list[Any]) -> list[int]:
    """The items of a seed list that are valid seeds, as seeds."""
    out = []
    for item in items:
        try:
            out.append(_SEED.validate_python(item))
        except ValidationError:
            pass
    return out


def _repeat(seeds: list[int]) -> str | None:
    """Why `seeds` is not a list of distinct seeds (the seeds given more than once), or None."""
    twice = sorted({s for i, s in enumerate(seeds) if s in seeds[:i]})
    if not twice:
        return None
    return (f"seeds must be distinct: {', '.join(map(str, twice))} "
            f"{'is' if len(twice) == 1 else 'are'} given more than once (a seed's trials would be planned twice)")
