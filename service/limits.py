"""What a valid spec must also fit to be run by this service: its bounds (the settings named in
`embinit.bounds.BOUNDS`, each problem at the place in the spec that sets the value) and its cluster's nodes
(a trial asking for more than any node has would never start). Read by `service.specs.prepare` and by the
submission (`service.submission`), each problem a (field path, message) pair for one 422.
"""

from __future__ import annotations

from typing import Any

from embinit.bounds import BOUNDS, over_setting
from embinit.spec import ExperimentSpec
from embinit.spec.path_fields import format_loc
from service.settings import Settings


def bound_problems(spec: ExperimentSpec, plan: tuple | list, settings: Settings) -> list[tuple[str, str]]:
    """Values beyond the service's bounds (the settings named in embinit.bounds.BOUNDS), once per place
    the spec sets them (its field path; the field's name where no place holds the value), wherever they
    were set (defaults, a task, an axis, a search grid, an Optuna range or a task defined in the spec,
    whose own defaults its trials leave unset in their configs)."""
    problems: dict[tuple[str, str], None] = dict.fromkeys(_cpus_problems(spec.resources.cpus, settings))
    data = spec.canonical()
    for key, bound in BOUNDS.items():
        if bound.setting is None:
            continue
        values = [getattr(spec, key)] if key in ExperimentSpec.model_fields else [p.config.get(key) for p in plan]
        values += [d.get(key) for d in (spec.define_tasks or {}).values()]   # a defined task's defaults
        space = spec.search.space.get(key) if spec.search is not None else None
        values += [getattr(space, "high", None)]
        limit = getattr(settings, bound.setting)
        for value in sorted({v for v in values if over_setting(key, v, limit)}):
            for loc in _bound_locs(data, key, value) or [key]:
                problems[(loc, over_setting(key, value, limit))] = None
    return list(problems)


def written_bound_problems(data: dict[str, Any], settings: Settings) -> list[tuple[str, str]]:
    """`bound_problems` of a spec that does not validate, from its data as sent: each number it writes
    beyond a bound, at its place, so one answer lists them with its field problems. The values it leaves
    to defaults (a task's own epochs) are checked once it validates."""
    resources = data.get("resources")
    cpus = resources.get("cpus") if isinstance(resources, dict) else None
    problems = _cpus_problems(cpus, settings) if isinstance(cpus, (int, float)) and not isinstance(cpus, bool) else []
    for key, bound in BOUNDS.items():
        if bound.setting is not None:
            limit = getattr(settings, bound.setting)
            problems += [(format_loc(place), why) for place, value in _written(data, key)
                         if (why := over_setting(key, value, limit))]
    return problems


def _cpus_problems(cpus: float, settings: Settings) -> list[tuple[str, str]]:
    return [("resources.cpus", f"{cpus} is below this service's minimum of {settings.min_cpus_per_trial} "
                               f"CPUs per trial")] if cpus < settings.min_cpus_per_trial else []


def _bound_locs(data: Any, key: str, value: float) -> list[str]:
    """Where the spec's data sets `key` to `value` (`tasks[1].epochs`, `axes.d_model[1]`,
    `search.space.epochs.high`), so a 422 names the place to fix, not only the field's name."""
    return [format_loc(place) for place, number in _written(data, key) if number == value]


def _written(data: Any, key: str, loc: tuple = ()) -> list[tuple[tuple, float]]:
    """(place, number) for each number the spec's data sets `key` to (a scalar, an axis list, a search
    range's bound)."""
    if isinstance(data, list):
        return [found for i, item in enumerate(data) for found in _written(item, key, loc + (i,))]
    if not isinstance(data, dict):
        return []
    out = []
    for k, v in data.items():
        if k == key:
            out += _leaves(v, loc + (k,))
        elif k != "extras":   # free-form: a key named like a field there is not that field
            out += _written(v, key, loc + (k,))
    return out


def _leaves(data: Any, loc: tuple) -> list[tuple[tuple, float]]:
    """(place, number) for each number under `loc`."""
    if isinstance(data, list):
        return [found for i, item in enumerate(data) for found in _leaves(item, loc + (i,))]
    if isinstance(data, dict):
        return [found for k, item in data.items() for found in _leaves(item, loc + (k,))]
    number = isinstance(data, (int, float)) and not isinstance(data, bool)
    return [(loc, data)] if number else []


def resource_problems(spec: ExperimentSpec, nodes: list[dict[str, float]] | None) -> list[tuple[str, str]]:
    """A trial must fit on one node of the cluster as it is now (`nodes`: each node's total resources;
    None when unknown): a trial asking for more would wait forever and hold an experiment slot."""
    if not nodes:
        return []
    out = []
    for field, name, unit in (("cpus", "CPU", "CPUs"), ("gpus", "GPU", "GPUs")):
        want, most = getattr(spec.resources, field), max(n.get(name, 0.0) for n in nodes)
        if want > most:
            have = f"no node has {unit}" if most == 0 else f"the largest node has {most:g} {unit}"
            out.append((f"resources.{field}", f"each trial asks for {want:g} {unit} but {have}; "
                                              f"the trials could never start"))
    return out
