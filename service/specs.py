"""A submitted spec, from request bytes to a validated, confined `ExperimentSpec`.

Order of checks: the body parses (JSON, or YAML with a YAML content type, safe loader, no aliases; either
way no key given twice); nothing asks for environment expansion; the spec validates
(`embinit.spec.load_spec`; refused, every problem listed: the cross-field problems and model sizes of
its valid part, its paths' problems, on a local Ray its data folders inside the roots, the bounds on the
numbers it writes, and lines saying what was not checked); its paths lie inside the configured roots; it
logs to the service's MLflow store; it has no more trials than the limit; then its bounds
(`service.limits`), hub models (offline: pinned hub datasets too), model sizes, data folders and what the
caller checks (`more`: the cluster's resources, the MLflow experiment), all in one answer.
Each failure is an `HTTPException` with a precise `detail`: a 422 lists its problems in the one shape of
`service.problems`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import yaml
from fastapi import HTTPException

from embinit.model_dims import dimension_problems
from embinit.redact import masked
from embinit.spec import (PRETRAINED_KEYS, ExperimentSpec, PlannedTrial, SpecError, SpecLoader, data_problems,
                          load_spec, offline_data_problems, path_fields, unique_pairs, yaml_error)
from embinit.spec.full_check import SIZES_NOT_CHECKED, spec_problems
from embinit.spec.yaml_text import not_a_mapping
from embinit.spec.planning import field_place
from embinit.spec.vector_files import vector_file_problems
from embinit.tasks.hub import DataAdvice, advised
from service.hub import check_hub_ids
from service.limits import bound_problems, written_bound_problems
from service.paths import confine_paths, format_loc
from service.problems import unprocessable
from service.settings import Settings

# How a spec sent here gives a task its data (the no-data error's advice): a folder inside the data roots
# named by the spec's or the task's data_dir, else this process's $EMBINIT_DATA_DIR, else the hub
# (embinit.tasks.load.task_folder); not the command line's --data-dir.
DATA_ADVICE = DataAdvice(
    "no data_dir in the spec", "this service's $EMBINIT_DATA_DIR",
    "put the files in a folder inside this service's data roots (setting EMBINIT_DATA_ROOTS) and give it as the "
    "task's data_dir, or give the spec's data_dir a folder there holding {task}/")


def api_terms(error: str | None) -> str | None:
    """A trial's recorded error as the API shows it. A trial this service runs records its no-data advice
    in these terms itself (the driver gives the sweep `DATA_ADVICE`); a record that still holds the
    command line's (written before trials were told their caller, or by `embinit run` into this store) is
    said as a spec sent here gives a task its data. The MLflow record is never rewritten."""
    return advised(error, DATA_ADVICE) if error else error


YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
JSON_TYPES = ("application/json",)


@dataclass(frozen=True)
class Submission:
    """A submitted spec, validated once and expanded once; what the rest of the submission reads."""

    spec: ExperimentSpec
    plan: tuple[PlannedTrial, ...]   # spec.plan(), in order (an Optuna search: one per scientific point x seed)
    data: dict[str, Any]       # the confined canonical spec, as stored and sent to the driver
    spec_hash: str
    trial_keys: list[str]
    n_trials: int
    notices: list[str]         # what the client should know, e.g. a model the trials fetch from the hub


class _NoAliasLoader(SpecLoader):
    """The spec loader (safe, a key given twice refused) without anchors/aliases: an alias bomb would
    expand into gigabytes on validation."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("YAML aliases (*name) are not accepted by the service")
        return super().compose_node(parent, index)


def _where(loc: str, key: Any) -> str:
    return f"{loc}[{key}]" if isinstance(key, int) else (f"{loc}.{key}" if loc else str(key))


def hostile_values(data: Any, max_items: int, loc: str = "") -> list[tuple[str, str]]:
    """What no spec may hold, found before validation (which costs far more): a list longer than
    `max_items`, a non-finite number (`Infinity`, `NaN`, `1e999`: JSON columns refuse them and no
    hyperparameter means them), a NUL character (PostgreSQL and MLflow refuse it)."""
    if isinstance(data, float) and not math.isfinite(data):
        return [(loc, f"{data!r} is not a finite number")]
    if isinstance(data, str) and "\x00" in data:
        return [(loc, "contains a NUL character")]
    if isinstance(data, dict):
        out = [(loc, f"key {str(k)[:40]!r} contains a NUL character") for k in data if "\x00" in str(k)]
        return out + [p for k, v in data.items() for p in hostile_values(v, max_items, _where(loc, k))]
    if isinstance(data, list):
        if len(data) > max_items:
            return [(loc, f"has {len(data)} items; this service accepts at most {max_items} per list")]
        return [p for i, v in enumerate(data) for p in hostile_values(v, max_items, _where(loc, i))]
    return []


def parse_body(body: bytes, content_type: str | None) -> dict[str, Any]:
    """The request body as a mapping; JSON unless the content type says YAML. Either way a key given twice
    is refused, as `embinit run` refuses it (`embinit.spec.loading.SpecLoader`), not silently the last."""
    media = (content_type or "application/json").split(";")[0].strip().lower()
    if media not in YAML_TYPES + JSON_TYPES:
        raise HTTPException(415, detail=f"unsupported content type {media!r}; send application/json "
                                        f"or application/yaml")
    try:
        text = body.decode("utf-8-sig")  # a leading BOM (Windows editors) is skipped, as YAML skips it
        data = (yaml.load(text, Loader=_NoAliasLoader) if media in YAML_TYPES
                else json.loads(text, object_pairs_hook=unique_pairs))
    except UnicodeDecodeError:
        raise unprocessable([("", "the body is not UTF-8 text")]) from None
    except yaml.YAMLError as e:
        raise unprocessable([("", yaml_error(e).replace("not valid YAML", "the body is not valid YAML", 1))]) from None
    except (ValueError, RecursionError) as e:
        kind = "YAML" if media in YAML_TYPES else "JSON"
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise unprocessable([("", f"the body is not valid {kind}: {first}")]) from None
    if not isinstance(data, dict):
        raise unprocessable([("", not_a_mapping(data, "the body"))])
    return data


def _env_refs(data: Any, loc: str = "") -> list[tuple[str, str]]:
    """`${VAR}` anywhere: the CLI expands these, the service must not (it would disclose its env)."""
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in _env_refs(v, f"{loc}.{k}" if loc else str(k))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in _env_refs(v, f"{loc}[{i}]")]
    if isinstance(data, str) and "${" in data:
        return [(loc, f"{data!r}: environment variables are not expanded in specs sent to the service; "
                      f"write the path relative to a data or pretrained root")]
    return []


def _without_env(data: Any) -> Any:
    """`data` with each `${VAR}` value replaced by a plain one, to validate the rest of the spec."""
    if isinstance(data, dict):
        return {k: _without_env(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_without_env(v) for v in data]
    return "env-reference" if isinstance(data, str) and "${" in data else data


def _validate(data: dict[str, Any], settings: Settings) -> ExperimentSpec:
    """The submission's one validation, of its data with the paths already confined (a confined path can
    make two trials the same). Problems with the paths themselves are found on the validated spec's data
    (`_confined`), so they name the fields as the spec model has them."""
    try:
        return load_spec(_rewritten(data, settings))
    except SpecError:
        raise unprocessable(*_every_problem(data, set(), settings)) from None
    except RecursionError:
        raise unprocessable([("", "the spec is nested too deeply")]) from None


def _rewritten(data: dict[str, Any], settings: Settings) -> dict[str, Any]:
    try:
        return confine_paths(data, settings.data_roots, settings.pretrained_roots)[0]
    except OSError:  # a value no filesystem takes (a name too long): validated as written, as before
        return data


def _every_problem(data: dict[str, Any], skip: set[str], settings: Settings
                   ) -> tuple[list[tuple[str, str]], int, list[str]]:
    """(every problem of a spec that is refused, the most listed, what was not checked): the field
    problems, the cross-field problems and model sizes of the part that validates
    (`embinit.spec.full_check`), the paths' problems, on a local Ray the data folders inside the roots (as
    `prepare` checks a valid spec's), and the service's bounds on the numbers it writes; those at the
    locations in `skip` (already reported) left out. What needs the whole spec valid (hub models, the
    bounds on values left to defaults) is said not checked."""
    try:
        rewritten, refused = confine_paths(data, settings.data_roots, settings.pretrained_roots)
    except OSError:   # a value no filesystem takes (a name too long): validated as written, no folder read
        rewritten, refused = data, None
    folders = settings.ray_address is None and refused is not None
    try:
        _, found, notes = spec_problems(rewritten, local=False, max_trials=settings.max_trials_per_experiment,
                                        advice=DATA_ADVICE if folders else None,
                                        unread=_refused_paths(rewritten, refused or []))
    except SpecError as e:   # the spec cannot be read at all
        found, notes = list(e.problems), [SIZES_NOT_CHECKED]
    found = [p for p in found if p[0] not in skip]
    found += _path_problems(data, skip | {loc for loc, _ in found}, settings)
    reported = skip | {loc for loc, _ in found}
    found += [p for p in written_bound_problems(data, settings) if p[0] not in reported]
    sizes = SIZES_NOT_CHECKED in notes
    notes = [n for n in notes if n != SIZES_NOT_CHECKED] + [NOT_CHECKED if sizes else NOT_CHECKED_BUT_SIZES]
    return found, settings.max_problems, notes


def _refused_paths(rewritten: dict[str, Any], refused: list[str]) -> list[Path]:
    """The values of the paths the roots refuse (`confine_paths`' problems, `loc: what`): no data folder
    under them is read, their problem is the path's (`_path_problems`)."""
    locs = {p.split(": ", 1)[0] for p in refused}
    return [Path(value) for loc, value in path_fields.paths(rewritten) if loc in locs]


_WAITING = ("hub models and this service's bounds on the values the spec leaves to defaults "
            "not checked until the problems above are fixed")
NOT_CHECKED = f"model sizes, {_WAITING}"
NOT_CHECKED_BUT_SIZES = _WAITING[0].upper() + _WAITING[1:]


def _path_problems(data: dict[str, Any], skip: set[str], settings: Settings) -> list[tuple[str, str]]:
    """The path problems of a spec that does not validate, from its data as sent (outside the roots, a
    pretrained file that does not exist), so one answer lists them with the field problems; those at the
    locations in `skip` (already reported) left out."""
    try:
        _, problems = confine_paths(data, settings.data_roots, settings.pretrained_roots)
    except (OSError, RecursionError):
        return []
    found = [tuple(p.split(": ", 1)) for p in problems]
    return [(loc, msg) for loc, msg in found if not _under(loc, skip)]


def _under(loc: str, skip: set[str]) -> bool:
    """Whether `loc` is one of `skip` or inside one (`foo.pretrained` under an unknown field `foo`)."""
    return any(loc == s or loc.startswith((f"{s}.", f"{s}[")) for s in skip)


def _confined(spec: ExperimentSpec, settings: Settings, tracking_uri: str) -> tuple[ExperimentSpec, dict[str, Any]]:
    """(the spec without a tracking URI, its canonical data), or HTTPException(422): a path outside the
    roots, or another MLflow store than the service's."""
    problems: list[tuple[str, str]] = []
    # compared and named with passwords masked: the answer must not disclose the store's password, nor
    # tell a guess of it (accepted) from a wrong one (refused); the value is dropped either way
    given = spec.mlflow.tracking_uri
    if given is not None and masked(given) not in (masked(tracking_uri), masked(settings.tracking_uri)):
        problems.append(("mlflow.tracking_uri", f"{masked(given)!r}: this service logs every experiment to "
                         f"its own store {masked(settings.tracking_uri)!r}; leave it out"))
    spec = spec.model_copy(update={"mlflow": spec.mlflow.model_copy(update={"tracking_uri": None})})
    canonical = spec.canonical()
    confined, path_problems = confine_paths(canonical, settings.data_roots, settings.pretrained_roots)
    problems += [tuple(p.split(": ", 1)) for p in path_problems]
    if problems:
        raise unprocessable(problems, settings.max_problems)
    if confined != canonical:  # confining is idempotent, so only a file that appeared meanwhile gets here
        spec = _validate(confined, settings)
        return spec, spec.canonical()
    return spec, canonical


def _too_many(n: int, settings: Settings) -> tuple[str, str]:
    return ("", f"the spec expands into {n} trials; this service accepts at most "
                f"{settings.max_trials_per_experiment} per experiment")


def prepare(data: dict[str, Any], settings: Settings, tracking_uri: str,
            more: Callable[[ExperimentSpec], list[tuple[str, str]]] | None = None) -> Submission:
    """Validate and confine a submitted spec, and expand it; raises HTTPException(422) listing every
    problem. `more(spec)`: the problems the caller finds in the validated spec (the cluster's resources,
    the MLflow experiment), listed in the same answer as the spec's own."""
    hostile = hostile_values(data, settings.max_list_items)
    if hostile:
        raise unprocessable(_env_refs(data) + hostile, settings.max_problems)
    refs = _env_refs(data)
    if refs:   # the spec's other problems too, so one answer lists them all
        found, limit, notes = _every_problem(_without_env(data), {loc for loc, _ in refs}, settings)
        raise unprocessable(refs + found, limit, notes)
    seeds = data.get("seeds")
    if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > settings.max_trials_per_experiment:
        # checked first: the spec would build a list this long; its other problems are those of one seed
        found, limit, notes = _every_problem({**data, "seeds": 1}, set(), settings)
        raise unprocessable([_too_many(seeds, settings), *found], limit, notes)
    spec, canonical = _confined(_validate(data, settings), settings, tracking_uri)
    n_trials = spec.num_trials()  # counted before the grid is built: it could be astronomically big
    if n_trials > settings.max_trials_per_experiment:
        raise unprocessable([_too_many(n_trials, settings)])
    try:
        plan = tuple(spec.plan())
    except SpecError as e:
        raise unprocessable(e.problems, settings.max_problems) from None
    # each independent of the others, so one answer lists them all
    problems = bound_problems(spec, plan, settings)
    hub_problems, notices = check_hub_ids(plan, settings.pretrained_roots, _locator(canonical))
    problems += hub_problems
    problems += offline_data_problems(spec)   # offline, a task's data_revision this machine's hub cache lacks
    # a d_model or heads that does not fit a local source's D, said where the spec sets it
    problems += dimension_problems(plan, spec.search, partial(field_place, spec))
    # on a local Ray the trials read the data folders and vector files this process sees: one lacking a
    # file, or a file no trial can read, fails every trial of its task or init, so say it now (a cluster's
    # nodes may hold other copies: left to the trials)
    problems += (data_problems(spec, advice=DATA_ADVICE) + vector_file_problems(spec.paths())
                 if settings.ray_address is None else [])
    problems += more(spec) if more is not None else []
    if problems:
        raise unprocessable(problems, settings.max_problems)
    return Submission(spec=spec, plan=plan, data=canonical, spec_hash=spec.spec_hash(),
                      trial_keys=[p.key for p in plan], n_trials=n_trials, notices=notices)


def _locator(data: dict[str, Any]):
    """(value, whether as a tokenizer) -> where the spec names it first in that role (`pretrained.glove`,
    `inits[1].tgt.pretrained`; `tasks[0].tokenizer`), else in any, else `inits` (a family's default, e.g.
    bert's bert-base-uncased). One hub id is often both a source and its tokenizer: each is said where the
    spec gives it as such."""
    found: dict[str, list[tuple]] = {}

    def walk(node: Any, loc: tuple, under: bool) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, loc + (k,), under or k in PRETRAINED_KEYS)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, loc + (i,), under)
        elif isinstance(node, str) and under:
            found.setdefault(node, []).append(loc)

    def locate(value: str, tokenizer: bool = False) -> str:
        locs = found.get(value, [])
        loc = next((loc for loc in locs if ("tokenizer" in loc) == tokenizer), locs[0] if locs else None)
        return format_loc(loc) if loc is not None else "inits"
    walk(data, (), False)
    return locate
