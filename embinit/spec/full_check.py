"""One check of a spec that lists every problem it can find independently, so fixing a spec takes one
round: the field problems, the cross-field problems of the parts that validated, the local paths that do
not exist (read from the raw data when the spec does not validate), the data folders' files and the model
sizes. A stage that cannot be judged because an earlier one failed says so in the list (e.g. "model sizes
not checked until the problems above are fixed") instead of staying silent."""

from __future__ import annotations

import copy
import re
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable

from pydantic import ValidationError

from embinit.config import RULE_FIELDS
from embinit.errors import trials_text
from embinit.spec import path_fields
from embinit.spec.experiment import ExperimentSpec
from embinit.spec.fields import SpecFields
from embinit.spec.planning import field_place
from embinit.spec.loading import (blamed, data_problems, missing_paths, offline_data_problems, spec_data,
                                  task_files_problem)
from embinit.spec.problems import SpecError, as_written, problems_of
from embinit.spec.vector_files import vector_file_problems

if TYPE_CHECKING:
    from embinit.tasks.hub import DataAdvice

CROSS_NOT_CHECKED = "checks across fields (pretrained sources per init, duplicate inits and tasks, heads vs. D) " \
                    "not run until the problems above are fixed"
SIZES_NOT_CHECKED = "model sizes not checked until the problems above are fixed"

# Top-level fields whose value no cross-field check, data folder or model size depends on (beyond the
# checks of their own): with a problem in them only, the rest of the spec is checked without them. (Of
# `analyses`, whose similarity reference the seeds are checked against, only the entry with the problem.)
_SET_ASIDE = {"name": "unchecked", "description": None, "resources": None, "max_concurrent": None,
              "retries": None, "cache_dir": None, "mlflow": None, "analyses": None, "execution": None}


def check_spec(source: Any, overrides: list[str] | tuple[str, ...] = (), *, local: bool = True,
               sizes: bool = True) -> ExperimentSpec:
    """`load_spec`, with the later stages' problems in the same SpecError: `local` the paths that do not
    exist and the data folders' files (`check_local_paths`), `sizes` the model dimensions
    (`embinit.model_dims.dimension_problems`)."""
    spec, problems, notes = spec_problems(source, overrides, local=local, sizes=sizes)
    if problems or spec is None:
        raise SpecError(problems, notes)
    return spec


def spec_problems(source: Any, overrides: list[str] | tuple[str, ...] = (), *, local: bool = True,
                  sizes: bool = True, max_trials: int | None = None, advice: DataAdvice | None = None,
                  unread: list[Path] = ()) -> tuple[ExperimentSpec | None, list[tuple[str, str]], list[str]]:
    """(the spec, or None when it does not validate; every problem found; what was not checked because
    of them). `max_trials`: the most trials whose sizes are checked (the service's limit: a refused spec's
    grid is not planned when it is larger; the count refuses it once the rest is fixed). `advice`: how the
    caller gives a task its data (`DataAdvice`, the command line's by default); with `local` off, given, the
    data folders are still checked, none under `unread` (the paths the caller refuses itself, unread): the
    service's check, which confines the paths to its roots."""
    data, base, keys, bad = spec_data(source, overrides)   # `bad`: malformed overrides, left out of `data`
    context = {"base_dir": base}
    try:
        spec = ExperimentSpec.model_validate(data, context=context)
        problems, checked, fields = [], spec, spec
    except ValidationError as e:
        spec, problems = None, as_written(problems_of(e, ExperimentSpec), data)
        checked, fields, cross = _validated_part(data, context, problems)
        problems += cross
    except SpecError as e:   # every field valid, a cross-field problem
        spec, problems = None, as_written(e.problems, data)
        checked, fields = None, _fields(data, context)
    notes = [m for p, m in problems if (p, m) == ("", CROSS_NOT_CHECKED)]
    problems = bad + blamed([p for p in problems if p != ("", CROSS_NOT_CHECKED)], keys)
    plans: dict[int, list] = {}

    def one_seed(s: ExperimentSpec) -> list:
        """`s`'s trials of its first seed, planned once for both checks (a trial's size and hub ids do not
        depend on its seed; the sweep or dry run that follows expands the whole grid)."""
        if id(s) not in plans:
            plans[id(s)] = s.model_copy(update={"seeds": s.seeds[:1]}).plan()
        return plans[id(s)]
    if local:
        problems += _local_problems(spec, fields, data, base, {where for where, _ in problems}, advice)
        problems += _offline_hub_problems(spec, one_seed) + (offline_data_problems(spec) if spec is not None else [])
        problems += vector_file_problems(spec.paths()) if spec is not None else []
        notes += _definitions_not_read(problems)
    elif advice is not None:
        problems += _folder_problems(fields, data, base, list(unread), advice)
        notes += _definitions_not_read(problems)
    if sizes:
        found = _size_problems(checked, bool(problems or notes), one_seed, max_trials)
        said = {m for _, m in problems}   # a vector file's problem, said at its field, is not said again at its trials
        problems += [p for p in found if p[0] and p[1] not in said]
        notes += [m for p, m in found if not p]
    return (None if bad else spec), problems, notes


def _definitions_not_read(problems: list[tuple[str, str]]) -> list[str]:
    """A task whose definition has problems is not read: its data files are checked once it is fixed."""
    names = sorted({where.split(".")[1] for where, _ in problems if where.startswith("define_tasks.")})
    return [f"data files of the tasks defined with problems above ({', '.join(names)}) not checked until "
            f"the definitions are fixed"] if names else []


def _fields(data: dict[str, Any], context: dict) -> SpecFields | None:
    try:
        return SpecFields.model_validate(data, context=context)
    except (ValidationError, SpecError):
        return None


def _validated_part(data: dict[str, Any], context: dict, problems: list[tuple[str, str]]
                    ) -> tuple[ExperimentSpec | None, SpecFields | None, list[tuple[str, str]]]:
    """(the spec without its invalid values when it validates, its fields when they do, the cross-field
    problems of the rest or a line saying they were not checked). Only values the rest does not depend on
    are left out (`_SET_ASIDE`, a hyperparameter of a task or the defaults other than those in `_KEPT`):
    another's absence would make the rest look wrong (a glove init "without" its invalid file)."""
    rest = copy.deepcopy(data)
    for path, _ in problems:
        if not _set_aside(rest, path):
            return None, None, _analyses_alone(rest, context) + [("", CROSS_NOT_CHECKED)]
    try:
        spec = ExperimentSpec.model_validate(rest, context=context)
        return spec, spec, []
    except SpecError as e:
        return None, _fields(rest, context), as_written(e.problems, rest)
    except ValidationError:
        return None, None, _analyses_alone(rest, context) + [("", CROSS_NOT_CHECKED)]


def _analyses_alone(data: dict[str, Any], context: dict) -> list[tuple[str, str]]:
    """The analyses' check across fields (`checks.reference_seed_problems`) where the rest cannot be checked
    (an init or a seed count with a problem), on the fields it reads alone: the seeds, the similarity
    settings and, for a `reference_emb_seed`, each `emb_seed` the spec sets. [] when one of those has a
    problem itself: a reference is not judged against seeds that are not known yet."""
    from embinit.spec.checks import reference_seed_problems
    sim = data.get("analyses").get("similarity") if isinstance(data.get("analyses"), dict) else None
    if not isinstance(sim, dict):
        return []
    part: dict[str, Any] = {"name": "analyses", "tasks": ["synthetic_classification"], "inits": ["xavier"],
                            "analyses": {"similarity": sim}, **({"seeds": data["seeds"]} if "seeds" in data else {})}
    if sim.get("reference_emb_seed") is not None:
        tasks = data.get("tasks")
        defaults, axes, search = (data.get(k) or {} for k in ("defaults", "axes", "search"))
        if not isinstance(tasks, list) or not all(isinstance(x, dict) for x in (defaults, axes, search)):
            return []
        emb_seed = [{"emb_seed": t.get("emb_seed")} if isinstance(t, dict) else {} for t in [defaults, *tasks]]
        part.update(defaults=emb_seed[0], tasks=[{"task": "synthetic_classification", **e} for e in emb_seed[1:]])
        part.update(axes={k: v for k, v in axes.items() if k == "emb_seed"})
        space = search.get("space")
        if isinstance(space, dict) and isinstance(space.get("emb_seed"), list):
            part["search"] = {"space": {"emb_seed": space["emb_seed"]}}
    try:
        return reference_seed_problems(SpecFields.model_validate(part, context=context))
    except (ValidationError, SpecError):
        return []


# hyperparameters the cross-field checks read (heads vs. D, the planned embedding seeds, the rules across a
# trial's fields): never left out
_KEPT = {"task", "data_dir", "d_model", "heads", "emb_seed", *RULE_FIELDS}


def _set_aside(rest: dict[str, Any], path: str) -> bool:
    """Leave the value at `path` out of `rest` (its default instead); False when the rest depends on it."""
    top = path.replace("[", ".").split(".")[0]
    if top not in ExperimentSpec.model_fields:   # an unknown field: nothing reads it
        rest.pop(top, None)
        return True
    analyses = rest.get("analyses")
    if top == "analyses" and "." in path and isinstance(analyses, dict):   # its one invalid entry: the rest checked
        analyses.pop(path.split(".")[1], None)
        return True
    if top in _SET_ASIDE:
        if _SET_ASIDE[top] is None:
            rest.pop(top, None)
        else:
            rest[top] = _SET_ASIDE[top]
        return True
    m = re.match(r"^(?:tasks\[(\d+)\]|defaults)\.(\w+)", path)
    if not m or m.group(2) in _KEPT:
        return False
    entry = rest.get("defaults") if m.group(1) is None else (
        rest["tasks"][int(m.group(1))] if isinstance(rest.get("tasks"), list) and int(m.group(1)) < len(rest["tasks"])
        else None)
    if not isinstance(entry, dict):
        return False
    entry.pop(m.group(2), None)   # absent: left out for an earlier problem of the same value
    return True


def _local_problems(spec: ExperimentSpec | None, fields: SpecFields | None, data: dict[str, Any],
                    base: Path | None, reported: set[str], advice: DataAdvice | None = None) -> list[tuple[str, str]]:
    """Paths that do not exist (the spec's, else the raw data's), then each task's data folder."""
    pairs = spec.paths() if spec is not None else _raw_paths(data, base)
    problems, missing = missing_paths([(w, v) for w, v in pairs if w not in reported])
    return problems + _folder_problems(fields, data, base, missing, advice)


def _folder_problems(fields: SpecFields | None, data: dict[str, Any], base: Path | None, missing: list[Path],
                     advice: DataAdvice | None) -> list[tuple[str, str]]:
    """Each task's data folder (from the valid fields, else from each task entry that validates alone),
    none under `missing` (paths already reported)."""
    if fields is not None:
        return data_problems(fields, missing, advice)
    return _task_folder_problems(data, base, missing, advice)


def _offline_hub_problems(spec: ExperimentSpec | None, one_seed: Callable[[ExperimentSpec], list]
                          ) -> list[tuple[str, str]]:
    """With Hugging Face kept offline, each hub id of the planned trials (a sub-word source, a tokenizer;
    pinned as `<id>@<revision>` or not) that this machine's hub cache lacks: every trial naming it would
    fail, so the spec is refused with the revision asked for and the ones the cache holds. Online, the
    trials may fetch it: left to them."""
    from embinit.errors import offline_miss
    from embinit.hf_cache import offline
    from embinit.init.source_files import hub_ids
    from embinit.tasks.tokenization import unregistered_hint
    if spec is None or offline() is None:
        return []
    found: dict[tuple[str, str], list[str]] = {}
    try:
        plan = one_seed(spec)
    except SpecError:   # the size check names it
        return []
    for p in plan:
        c = p.config
        ids = hub_ids(c.get("init"), c.get("pretrained"), c.get("src_init"), c.get("src_pretrained"),
                      tokenizer=c.get("tokenizer"))
        for field, hub_id in ids.items():
            if (why := offline_miss(hub_id)) is not None:
                # a tokenizer typo ('spacey') has a bare hub id's shape: the registered names, the closest
                typo = unregistered_hint(hub_id) if field == "tokenizer" and "/" not in hub_id else ""
                why = f"{hub_id!r}: {why}" + (f"; nor a tokenizer name: {typo}" if typo else "")
                found.setdefault((field, why), []).append(f"{p.task} x {p.label}")
    return [(trials_text(sorted(set(names))), f"{field} {why}") for (field, why), names in found.items()]


def _resolved(value: Any, base: Path | None) -> str | None:
    """A raw path value as the spec model would have it (`${VAR}` expanded, `./x` next to the spec file);
    None when it is no string or names an unset variable (a field problem already)."""
    if not isinstance(value, str):
        return None
    try:
        return path_fields.spec_path(value, SimpleNamespace(context={"base_dir": base}))
    except ValueError:
        return None


def _raw_paths(data: dict[str, Any], base: Path | None) -> list[tuple[str, str]]:
    return [(where, path) for where, value in path_fields.paths(data) if (path := _resolved(value, base))]


def _task_folder_problems(data: dict[str, Any], base: Path | None, missing: list[Path],
                          advice: DataAdvice | None = None) -> list[tuple[str, str]]:
    """`data_problems` for a spec that does not validate, from the raw data: each entry of a registered
    task, its folder (its `data_dir`, else the spec's `data_dir`/<task>, else $EMBINIT_DATA_DIR's) and its
    `extras` (else the defaults')."""
    from embinit.task_registry import DEFINED, TASKS
    tasks = data.get("tasks") if isinstance(data.get("tasks"), list) else []
    root = _resolved(data.get("data_dir"), base)
    defaults = data.get("defaults") if isinstance(data.get("defaults"), dict) else {}
    problems = []
    for i, raw in enumerate(tasks):
        entry = {"task": raw} if isinstance(raw, str) else raw
        if not isinstance(entry, dict) or entry.get("task") not in TASKS:
            continue
        task = entry["task"]
        if task in DEFINED and not _defined_here(data, task):   # another spec's definition of the name
            continue
        own = _resolved(entry.get("data_dir"), base)
        folder = own or (str(Path(root) / task) if root else None)   # a generated task reads no folder
        if folder is None and entry.get("data_revision") is not None:   # a pinned hub dataset: no folder read
            continue
        extras = next((e for e in (entry.get("extras"), defaults.get("extras")) if isinstance(e, dict)), {})
        where = f"tasks[{i}].data_dir" if own else ("data_dir" if root else f"tasks[{i}]")
        problems += task_files_problem(task, folder, extras, missing, where, advice,
                                       root if where == "data_dir" else None, i)
    return problems


def _defined_here(data: dict[str, Any], task: str) -> bool:
    """Whether the raw spec defines `task` validly, and it is registered as that definition."""
    from embinit import task_defs
    definition = (data.get("define_tasks") or {}).get(task) if isinstance(data.get("define_tasks"), dict) else None
    if definition is None or task_defs.problems(task, definition):
        return False
    task_defs.ensure(task, definition)
    return True


def _size_problems(spec: ExperimentSpec | None, after_problems: bool,
                   one_seed: Callable[[ExperimentSpec], list], max_trials: int | None = None) -> list[tuple[str, str]]:
    """The model-size problems of a spec that validated (its valid part), else a line saying they were
    not checked (only where there are problems above). A trial's size and the name a problem gives it
    (task x init) do not depend on its seed, so one seed is planned: the sweep or the dry run that
    follows expands the whole grid once (this check expanded it a second time)."""
    from embinit.model_dims import dimension_problems
    if spec is not None and max_trials is not None and spec.num_trials() > max_trials:
        return [("", SIZES_NOT_CHECKED)]
    if spec is None:
        return [("", SIZES_NOT_CHECKED)] if after_problems else []
    try:
        return dimension_problems(one_seed(spec), spec.search, partial(field_place, spec))
    except SpecError as e:
        return e.problems
