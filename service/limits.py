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
    problems: dict[tuple[str, str], None] = {}
    data = spec.canonical()
    if spec.resources.cpus < settings.min_cpus_per_trial:
        problems[("resources.cpus", f"{spec.resources.cpus} is below this service's minimum of "
                  f"{settings.min_cpus_per_trial} CPUs per trial")] = None
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


def _bound_locs(data: Any, key: str, value: float, loc: tuple = ()) -> list[str]:
    """Where the spec's data sets `key` to `value` (`tasks[1].epochs`, `axes.d_model[1]`,
    `search.space.epochs.high`), so a 422 names the place to fix, not only the field's name."""
    if isinstance(data, list):
        return [found for i, item in enumerate(data) for found in _bound_locs(item, key, value, loc + (i,))]
    if not isinstance(data, dict):
        return []
    out = []
    for k, v in data.items():
        if k == key:
            out += [format_loc(place) for place in _leaves(v, value, loc + (k,))]
        elif k != "extras":   # free-form: a key named like a field there is not that field
            out += _bound_locs(v, key, value, loc + (k,))
    return out


def _leaves(data: Any, value: float, loc: tuple) -> list[tuple]:
    """The places under `loc` whose number is `value` (a scalar, an axis list, a search range's bound)."""
    if isinstance(data, list):
        return [place for i, item in enumerate(data) for place in _leaves(item, value, loc + (i,))]
    if isinstance(data, dict):
        return [place for k, item in data.items() for place in _leaves(item, value, loc + (k,))]
    number = isinstance(data, (int, float)) and not isinstance(data, bool)
    return [loc] if number and data == value else []


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
