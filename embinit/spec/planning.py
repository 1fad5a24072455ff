"""A spec expanded into trials: tasks x inits x axes x grid-search points x seeds, each a `TrialConfig`
with the coordinates the report groups by (`PlannedTrial`)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from embinit.config import MOOT_FIELDS, TrialConfig
from embinit.spec.inits import InitEntry, family_default, source_name, with_init_axes
from embinit.spec.fields import SpecFields
from embinit.spec.models import TaskEntry
from embinit.spec.path_fields import spec_path
from embinit.task_registry import task_kind



class PlannedTrial(BaseModel):
    """One expanded trial with the coordinates the report groups by."""

    config: dict[str, Any]
    key: str
    task: str
    label: str              # paper label, e.g. GloVe_Xavier (with the source side when it differs)
    axes: dict[str, Any]    # ablation axis values
    point: dict[str, Any]   # search-space values ({} without a search)
    seed: int


def has_source_table(task: str) -> bool:
    """Whether the task's kind has a source table of its own (translation): `src_init` applies."""
    return task_kind(task).two_sided


def search_points(spec: SpecFields, moot: tuple[str, ...] | list[str] = ()) -> list[dict[str, Any]]:
    """Grid search points, without the `moot` fields (`moot_axes`) ([{}] without a grid search; Optuna
    points are drawn at run time)."""
    keys = [name for name in _grid(spec) if name not in moot]
    if spec.search is None or spec.search.method != "grid":
        return [{}]
    return [dict(zip(keys, combo)) for combo in itertools.product(*(spec.search.space[name] for name in keys))]


def _grid(spec: SpecFields) -> dict[str, list[Any]]:
    """The grid search's space ({} without a grid search)."""
    return spec.search.space if spec.search is not None and spec.search.method == "grid" else {}


def axis_points(spec: SpecFields, moot: tuple[str, ...] | list[str] = ()) -> list[dict[str, Any]]:
    """The points of the spec's axes, without the `moot` ones (`moot_axes`)."""
    keys = [name for name in spec.axes if name not in moot]
    return [dict(zip(keys, combo)) for combo in itertools.product(*(spec.axes[name] for name in keys))]


def moot_axes(spec: SpecFields, task: TaskEntry, init: InitEntry) -> list[str]:
    """The axes and grid-search fields that change nothing `init` computes on `task`: `oov` where no table
    of its trials has rows a rule fills (`TrialConfig.oov_applies`: a random init, a `match`ed source). Such
    an init is planned once, not once per rule: its trials would differ in nothing (their keys are the
    same)."""
    (oov,) = MOOT_FIELDS
    if not (oov in spec.axes or oov in _grid(spec)) or trial_config(spec, task, init, spec.seeds[0]).oov_applies():
        return []
    return [oov]


def moot_inits(spec: SpecFields) -> dict[str, list[str]]:
    """Each axis (`axis oov`) or grid-search field (`search.space.oov`) that is moot for some inits
    (`moot_axes`) -> those inits, as `task x label`."""
    out: dict[str, list[str]] = {}
    for task, init in itertools.product(spec.tasks, spec.inits):
        for name in moot_axes(spec, task, init):
            place = f"axis {name}" if name in spec.axes else f"search.space.{name}"
            out.setdefault(place, []).append(f"{task.task} x {init.label_for(has_source_table(task.task))}")
    return out


def plan(spec: SpecFields) -> list[PlannedTrial]:
    """Every trial: tasks x inits x axes x search points x seeds, in that nesting order; an init's moot
    axes and grid-search fields (`moot_axes`) are left out of its points."""
    out = []
    for task, init in itertools.product(spec.tasks, spec.inits):
        moot = moot_axes(spec, task, init)
        for axes, point, seed in itertools.product(axis_points(spec, moot), search_points(spec, moot), spec.seeds):
            cfg = trial_config(spec, task, init, seed, {**axes, **point})
            out.append(PlannedTrial(config=cfg.to_dict(), key=cfg.key(), task=task.task,
                                    label=init.label_for(has_source_table(task.task)), axes=axes,
                                    point=point, seed=seed))
    return out


def field_place(spec: SpecFields, trials: list[PlannedTrial], field: str) -> str | None:
    """The one place of the spec that sets `field` for every one of `trials` (`tasks[0].d_model`,
    `defaults.d_model`, `axes.d_model[1]`, `search.space.d_model[0]`, an Optuna search's
    `search.space.d_model`), so a problem in that field is said where to fix it; None where they take it
    from several places, or from none (a task's default)."""
    places = {_place(spec, p, field) for p in trials}
    return places.pop() if len(places) == 1 and None not in places else None


def _place(spec: SpecFields, p: PlannedTrial, field: str) -> str | None:
    value = p.config.get(field)
    if spec.search is not None and spec.search.drawn and field in spec.search.space:
        return f"search.space.{field}"
    for name, values in ((f"search.space.{field}", p.point), (f"axes.{field}", p.axes)):
        if field in values:
            listed = spec.search.space[field] if values is p.point else spec.axes[field]
            return f"{name}[{listed.index(values[field])}]"
    entries = [i for i, t in enumerate(spec.tasks) if t.task == p.task and t.set_values().get(field) == value]
    if len(entries) == 1:
        return f"tasks[{entries[0]}].{field}"
    return f"defaults.{field}" if not entries and spec.defaults.set_values().get(field) == value else None


def planned_count(spec: SpecFields) -> int:
    """len(plan(spec)), without expanding it."""
    n = 0
    for task, init in itertools.product(spec.tasks, spec.inits):
        moot = moot_axes(spec, task, init)
        n += math.prod(len(values) for name, values in (*spec.axes.items(), *_grid(spec).items())
                       if name not in moot)
    return n * len(spec.seeds)


def trial_config(spec: SpecFields, task: TaskEntry, init: InitEntry, seed: int,
                 overrides: dict[str, Any] | None = None) -> TrialConfig:
    """One trial's config: the spec's defaults, then the task's values, then `overrides` (axes and
    search point), with the init's sides and their pretrained sources. Init axes (`sigma`) are not
    hyperparameters: they extend the target side's init spec (`spec.inits.INIT_AXES`)."""
    overrides = dict(overrides or {})
    init = with_init_axes(init, overrides)
    values: dict[str, Any] = {"threads": max(1, int(spec.resources.cpus))}
    values.update(spec.defaults.set_values())
    values.update({k: v for k, v in task.set_values().items() if k not in ("task", "data_dir")})
    values.update(overrides)
    if init.side_option("tgt", "oov"):
        values.setdefault("oov", init.side_option("tgt", "oov"))
    two_sided = init.src is not None and has_source_table(task.task)
    tgt_path = init.pretrained or spec_path(init.side_option("tgt", "pretrained"))
    src_path = init.src_pretrained or spec_path(init.side_option("src", "pretrained"))
    return TrialConfig(task=task.task, init=init.tgt_str(), seed=seed,
                       src_init=init.src_str() if two_sided else None,
                       pretrained=pretrained_for(spec, init.tgt, tgt_path),
                       src_pretrained=(pretrained_for(spec, init.src, src_path) if two_sided else None),
                       data_dir=data_dir_for(spec, task), task_def=task.definition, **values)


def pretrained_for(spec: SpecFields, init: str | dict | None, explicit: str | None) -> str | None:
    """Path of a side's source: the entry's own, else the spec's (per source family), else the
    family's default (a hub id for BERT/T5, None for file formats)."""
    source = source_name(init)
    if explicit is not None or source is None:
        return explicit
    if isinstance(spec.pretrained, dict):
        return spec.pretrained.get(source, family_default(source))
    return spec.pretrained or family_default(source)


def data_dir_for(spec: SpecFields, task: TaskEntry) -> str | None:
    if task.data_dir is not None:
        return task.data_dir
    if spec.data_dir is None or task.task.startswith("synthetic"):
        return None
    return str(Path(spec.data_dir) / task.task)
