"""Checks that involve more than one field of a spec (run once every field is valid): axis and search
values, the init entries' (`embinit.spec.init_checks`), duplicate tasks, heads vs. D, the rules across a
trial's fields (`embinit.config.config_problems`) over every planned trial, analyses and execution
against the rest."""

from __future__ import annotations

import itertools
from typing import Any


from embinit import bounds
from embinit.config import HYPERPARAMETERS, RULE_FIELDS, config_problems, data_revision_problems, task_defaults
from embinit.errors import trials_text
from embinit.model_dims import divisors
from embinit.spec.fields import SpecFields
from embinit.spec.init_checks import init_problems
from embinit.spec.inits import INIT_AXES, init_axis_problem, source_name
from embinit.spec.models import typed_value
from embinit.spec.planning import has_source_table, trial_config



def _check_values(where: str, name: str, values: list[Any]) -> list[tuple[str, str]]:
    """Each value of an axis/search list must be a valid value of hyperparameter `name`."""
    if name not in HYPERPARAMETERS:
        return [(where, f"{name!r} is not a hyperparameter; choose from {sorted(HYPERPARAMETERS)} (axes also take "
                        f"the init axes {sorted(INIT_AXES)})")]
    found = ((i, value, typed_value(name, value)[1]) for i, value in enumerate(values))
    return [(f"{where}[{i}]", f"{why}, got {value!r}") for i, value, why in found if why]


def _range_problems(where: str, name: str, space) -> list[tuple[str, str]]:
    out = []
    for end in ("low", "high"):
        value = getattr(space, end)
        value = int(value) if space.type == "int" and float(value).is_integer() else value
        msg = bounds.problem(name, value)
        if msg is None:
            found = _check_values(f"{where}.{end}", name, [value])
            msg = found[0][1] if found else None
        if msg:
            out.append((f"{where}.{end}", msg))
    return out


def _heads_problems(spec: SpecFields) -> list[tuple[str, str]]:
    """An init without a pretrained source on any side (all-Xavier) gets D from `d_model` or the task
    default, not from a file; heads set explicitly must divide that D, or every such trial fails at start."""
    out = []
    for i, task in enumerate(spec.tasks):
        for j, init in enumerate(spec.inits):
            sides = [init.tgt] + ([init.src] if init.src is not None and has_source_table(task.task) else [])
            if any(source_name(v) for v in sides):
                continue
            cfg = trial_config(spec, task, init, spec.seeds[0])
            d_model = cfg.d_model or task_defaults(task.task).d_model
            if task.heads is not None and d_model % cfg.heads:
                # a D the spec sets is kept: the heads are what to change (a default D may be set instead)
                fix = f"choose heads from {divisors(d_model)}" + (
                    "" if cfg.d_model else ", or set `d_model` on the task to a multiple of the heads")
                out.append((f"tasks[{i}].heads", f"heads={cfg.heads} does not divide d_model={d_model}, the D of "
                            f"inits[{j}] ({init.label_for(has_source_table(task.task))}, no pretrained file to take "
                            f"D from); {fix}"))
                break
    return out


def cross_check(spec: SpecFields) -> list[tuple[str, str]]:
    """Problems that involve more than one field (each field alone is valid)."""
    return (_value_problems(spec) + init_problems(spec) + reference_seed_problems(spec)
            + _heads_problems(spec) + _rule_problems(spec) + _execution_problems(spec) + _task_problems(spec)
            + _search_metric_problems(spec) + _graphs_problems(spec) + _data_revision_problems(spec))


def _rule_problems(spec: SpecFields) -> list[tuple[str, str]]:
    """The rules no trial may break (`config_problems`, which the trainer's `check_config` applies to
    one trial) over every trial the spec plans, each distinct problem once with the trials it concerns
    (`trials synthetic_translation x every init`). The rules read the task and `RULE_FIELDS` only, so only
    those fields' axis and search values are varied: the whole grid is never expanded."""
    points = _rule_points(spec)
    found: dict[str, list[str]] = {}
    for task in spec.tasks:
        hits: dict[str, dict[str, list[dict[str, Any]]]] = {}   # problem -> init label -> points it is at
        for init in spec.inits:
            label = init.label_for(has_source_table(task.task))
            for point in points:
                for why in config_problems(trial_config(spec, task, init, spec.seeds[0], point)):
                    hits.setdefault(why, {}).setdefault(label, []).append(point)
        for why, by_label in hits.items():
            groups: dict[tuple[str, ...], list[str]] = {}   # the values it is at -> the inits
            for label, at in by_label.items():
                groups.setdefault(_values_at(at, points), []).append(label)
            for values, labels in groups.items():
                named = ["every init"] if len(labels) == len(spec.inits) > 1 else labels
                found.setdefault(why, []).extend(f"{task.task} x {n}{v}" for n in named for v in values)
    return [(trials_text(names), why) for why, names in found.items()]


def _values_at(at: list[dict[str, Any]], points: list[dict[str, Any]]) -> tuple[str, ...]:
    """` (train_embeddings=False)` for each of the `points` in `at` (where a problem is), naming only the
    fields it depends on: a field is left out when, wherever the problem is, it is there at each value."""
    names, rows = list(points[0]), [tuple(p.values()) for p in at]
    for i in reversed(range(len(names))):   # from the last, so the earlier fields keep their index
        values = list(dict.fromkeys(p[names[i]] for p in points))
        if all(r[:i] + (v,) + r[i + 1:] in rows for r in rows for v in values):
            rows = list(dict.fromkeys(r[:i] + r[i + 1:] for r in rows))
            del names[i]
    return tuple(f" ({', '.join(f'{k}={v!r}' for k, v in zip(names, r))})" if names else "" for r in rows)


def _rule_points(spec: SpecFields) -> list[dict[str, Any]]:
    """Each combination of the values that the axes and the search space give `RULE_FIELDS` (a grid's
    points, or the values an Optuna search may draw; values the field refuses are problems already and
    left out); [{}] when they give none."""
    choices: dict[str, list[Any]] = {}
    for name in RULE_FIELDS:
        space = spec.search.space.get(name) if spec.search is not None else None
        values = [*spec.axes.get(name, []), *(space if isinstance(space, list) else [])]
        valid = [v for i, v in enumerate(values) if v not in values[:i] and not _check_values("", name, [v])]
        if valid:
            choices[name] = valid
    return [dict(zip(choices, combo)) for combo in itertools.product(*choices.values())]


def _value_problems(spec: SpecFields) -> list[tuple[str, str]]:
    """Axis and search-space values must be values of the hyperparameter they name."""
    problems: list[tuple[str, str]] = []
    for name, values in spec.axes.items():
        if not values:
            problems.append((f"axes.{name}", "an axis needs at least one value"))
        if name in INIT_AXES:
            problems += [(f"axes.{name}[{i}]", why) for i, v in enumerate(values)
                         if (why := init_axis_problem(name, v))]
            continue
        problems += _check_values(f"axes.{name}", name, values)
    problems += [p for name, values in spec.axes.items() for p in _repeats(f"axes.{name}", values)]
    if spec.search is not None:
        for name, values in spec.search.space.items():
            where = f"search.space.{name}"
            if name in spec.axes:
                problems.append((where, f"{name!r} is both an ablation axis and searched; pick one"))
            if isinstance(values, list):
                problems += _check_values(where, name, values) + _repeats(where, values)
            elif name not in HYPERPARAMETERS:
                problems += _check_values(where, name, [])
            else:  # an Optuna range: both ends valid values (embinit.bounds, the field's own constraints)
                problems += _range_problems(where, name, values)
    return problems


def _repeats(where: str, values: list[Any]) -> list[tuple[str, str]]:
    """A value an axis or grid list gives twice (as typed: `1e-3` and `0.001` are one) plans the same
    trials twice, under the same keys: the sweep trained them once and said half its trials never finished,
    as duplicate seeds and inits are refused."""
    return [(f"{where}[{i}]", f"repeats {where}[{values.index(v)}] ({v!r}); remove it: it plans the same trials "
             f"again") for i, v in enumerate(values) if v in values[:i]]


def reference_seed_problems(spec: SpecFields) -> list[tuple[str, str]]:
    """The similarity analysis' reference seed against the seeds the spec plans: the one check of `analyses`
    across fields (`full_check` runs it alone, on the fields it reads, where the rest cannot be checked)."""
    sim = spec.analyses.similarity if spec.analyses is not None else None
    if sim is not None and sim.reference_seed is not None and sim.reference_seed not in spec.seeds:
        return [("analyses.similarity.reference_seed", f"seed {sim.reference_seed} is not one of "
                 f"the spec's seeds {spec.seeds}, so no trial would write its snapshots")]
    if sim is not None and sim.reference_emb_seed is not None:
        planned = _emb_seeds(spec)
        if planned is not None and sim.reference_emb_seed not in planned:
            return [("analyses.similarity.reference_emb_seed", f"embedding seed {sim.reference_emb_seed} is "
                     f"not one the spec's trials use {planned}, so no trial would write its snapshots")]
    return []


def _emb_seeds(spec: SpecFields) -> list[int] | None:
    """Every embedding seed a trial of the spec may use (a superset; the grid is never expanded), sorted;
    None when an `emb_seed` axis or grid value is not a valid one (its own problem): which seed it was meant
    to be is unknown, so the reference is not judged against the rest (a raw TypeError sorting 'abc' did)."""
    fixed = [h.emb_seed for h in (spec.defaults, *spec.tasks)]
    space = spec.search.space.get("emb_seed") if spec.search is not None else None
    listed = [*spec.axes.get("emb_seed", []), *(space if isinstance(space, list) else [])]
    if _check_values("", "emb_seed", listed):
        return None
    # None (an axis value `null`) is the trial's own seed, among spec.seeds already
    return sorted(set(spec.seeds) | {v for v in [*fixed, *listed] if v is not None})


def _task_problems(spec: SpecFields) -> list[tuple[str, str]]:
    tasks = [t.task for t in spec.tasks]
    return [(f"tasks[{i}]", f"task {t!r} is listed twice") for i, t in enumerate(tasks) if t in tasks[:i]]


def _data_revision_problems(spec: SpecFields) -> list[tuple[str, str]]:
    """A task entry's `data_revision` on a task that reads a data folder (its data_dir, the spec's data_dir
    root) or has no hub copy (generated, defined in the spec): `config.data_revision_problems`."""
    return [(f"tasks[{i}].data_revision", why) for i, task in enumerate(spec.tasks) if task.data_revision is not None
            for why in data_revision_problems(trial_config(spec, task, spec.inits[0], spec.seeds[0]))]


def _search_metric_problems(spec: SpecFields) -> list[tuple[str, str]]:
    """A search selects its points by the best value of a metric the trainer tracks (`best/<metric>`) for
    every task of the spec, in that metric's direction: another metric (`val/bleu` of a translation task,
    any `test/...`) has no best value, and every point would tie."""
    from embinit.errors import did_you_mean
    from embinit.task_registry import tracked_metrics
    search = spec.search
    if search is None or not search.metric:
        return []
    untracked, wrong_mode = [], []
    for i, task in enumerate(spec.tasks):
        tracked = dict(tracked_metrics(task.task))
        if search.metric not in tracked:
            untracked.append(f"tasks[{i}] ({task.task}) tracks {sorted(tracked)}"
                             f"{did_you_mean(search.metric, tracked)}")
        elif search.mode and search.mode != tracked[search.metric]:
            wrong_mode.append(tracked[search.metric])
    out = []
    if untracked:
        out.append(("search.metric", f"{search.metric!r} is not a metric the trainer tracks, so no search point "
                    f"would have a best value to compare: {'; '.join(untracked)}"))
    if wrong_mode:
        better = "lower" if wrong_mode[0] == "min" else "higher"
        out.append(("search.mode", f"{search.metric} is better when {better} (mode: {wrong_mode[0]}), "
                    f"got mode: {search.mode}"))
    return out


def _execution_problems(spec: SpecFields) -> list[tuple[str, str]]:
    """Fused execution trains whole groups at once (a grid point's trials, an Optuna point's seeds);
    what needs one trial at a time is refused."""
    out = []
    if spec.execution.trials_per_unit > 1 and (spec.execution.fuse != "off" or spec.drawn):
        out.append(("execution.trials_per_unit", "trials_per_unit packs the trials of a grid with fuse: off; "
                                                 "fused groups and optuna points are units already"))
    if spec.execution.fuse == "off":
        return out
    if spec.execution.trainer == "noop":
        out.append(("execution.fuse", "the noop trainer runs one trial per Ray trial: use fuse: off"))
    return out


def _graphs_problems(spec: SpecFields) -> list[tuple[str, str]]:
    """`cuda_graphs: true` trials need a GPU each: with `resources.gpus: 0` Ray gives them none (their
    device then resolves to the CPU, which the trainer refuses)."""
    if spec.resources.gpus > 0:
        return []
    points = _rule_points(spec)
    tasks = [t.task for t in spec.tasks
             if any(trial_config(spec, t, spec.inits[0], spec.seeds[0], p).cuda_graphs is True for p in points)]
    if not tasks:
        return []
    return [("resources.gpus", f"cuda_graphs: true needs a GPU for each trial ({', '.join(dict.fromkeys(tasks))}), "
                               "but resources.gpus is 0: give each trial a GPU share (e.g. gpus: 0.25), or set "
                               "cuda_graphs to false")]
