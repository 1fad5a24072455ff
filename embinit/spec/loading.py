"""Reading a spec: a dict, YAML/JSON text, a file path or a spec, validated into an `ExperimentSpec`
with every problem reported in one `SpecError`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from embinit.file_inputs import folder_problem
from embinit.spec.experiment import ExperimentSpec
from embinit.spec.problems import SpecError, as_written, problems_of
from embinit.spec.yaml_text import SpecLoader, not_a_mapping, shape_problem, yaml_error
from embinit.text_files import utf8_error

if TYPE_CHECKING:
    from embinit.tasks.hub import DataAdvice


def _read(source: Any) -> tuple[dict[str, Any], Path | None]:
    """(raw spec data, the folder of the file it came from or None)."""
    if isinstance(source, ExperimentSpec):
        return source.canonical(), None
    if isinstance(source, dict):
        return source, None
    text, base, where = None, None, ""
    if isinstance(source, Path) or (isinstance(source, str) and names_a_file(source)):
        path = Path(source).expanduser()
        base, where = path.resolve().parent, f" in {str(path)!r}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise SpecError([("", f"cannot read spec file {str(path)!r}: {e.strerror}")]) from None
        except UnicodeDecodeError:   # each line that is not, and how to re-encode it
            raise SpecError([("", f"spec file {str(path)!r} is not UTF-8 text: {utf8_error(path, path.read_bytes())}")]
                            ) from None
    elif isinstance(source, str):
        text = source
    else:
        raise SpecError([("", f"a spec must be a mapping, YAML text or a file path, got {type(source).__name__}")])
    try:
        data = yaml.load(text, Loader=SpecLoader)   # a SafeLoader
    except yaml.YAMLError as e:
        raise SpecError([("", yaml_error(e, where))]) from None
    if not isinstance(data, dict):
        raise SpecError([("", not_a_mapping(data, f"the spec{where}"))])
    if (problem := shape_problem(data)) is not None:
        raise SpecError([("", f"the spec{where} {problem}")])
    return data, base


def names_a_file(text: str) -> bool:
    """Whether a string given as a spec is a file's name rather than YAML text: one line that ends in
    .yaml/.yml/.json (any case), names an existing file, or has none of YAML's `:`, `{`, `[` (`myspec`,
    `-`: a mapping could not be written without them, so it is a path that does not exist)."""
    line = text.strip()
    if "\n" in line or not line:
        return False
    return (line.lower().endswith((".yaml", ".yml", ".json")) or Path(line).expanduser().is_file()
            or not any(c in line for c in ":{["))


def load_spec(source: Any, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentSpec:
    """A validated spec from a dict, YAML/JSON text, a file path or a spec; raises SpecError listing
    every problem. `overrides`: command-line `key=value` items (embinit.spec.overrides), applied to the
    spec's data before validation; a problem they cause names the override. (`embinit.spec.full_check`
    adds the problems of local paths, data folders and model sizes to the same list.)"""
    data, base, keys, bad = spec_data(source, overrides)
    try:
        spec = ExperimentSpec.model_validate(data, context={"base_dir": base})
    except ValidationError as e:
        found = as_written(problems_of(e, ExperimentSpec), data)
    except SpecError as e:
        found = as_written(e.problems, data)
    else:
        if not bad:
            return spec
        found = []
    raise SpecError(bad + blamed(found, keys)) from None


def spec_data(source: Any, overrides: list[str] | tuple[str, ...] = ()) -> tuple[dict[str, Any], Path | None,
                                                                              dict[str, str], list[tuple[str, str]]]:
    """(the raw spec data with the well-formed `overrides` applied, the folder of its file or None,
    {overridden key: the override item}, the problems of the malformed overrides, which are left out of the
    data: the caller lists them with the problems the rest has); raises SpecError when the source cannot be
    read."""
    data, base = _read(source)
    if not overrides:
        return data, base, {}, []
    from embinit.spec import overrides as override_items
    items = list(overrides)
    new, problems = override_items.apply(data, items, set(ExperimentSpec.model_fields))
    return (new, base, {item.partition("=")[0].strip(): item for item in items},
            [(f"override {k}", m) for k, m in problems])


def blamed(problems: list[tuple[str, str]], keys: dict[str, str]) -> list[tuple[str, str]]:
    """Each problem's message naming the override that set its field, if one did. An override of a
    hyperparameter (`epochs=abc`) sets it in several places (`defaults.epochs`, each task's `epochs`),
    some of which the spec may not have (a spec without `defaults`): its problem is said once, at the
    key the override wrote (`epochs`)."""
    if not keys:
        return list(problems)
    return list(dict.fromkeys(_blame(path, message, keys) for path, message in problems))


def _blame(path: str, message: str, keys: dict[str, str]) -> tuple[str, str]:
    """The problem at `path`, its message naming the override that set the field, if one did (then at the
    override's key where it set a hyperparameter)."""
    from embinit.config import HYPERPARAMETERS
    field = path.replace("[", ".").split(".")
    key = next((key for key in keys if key in field or path.startswith(key)), None)
    if key is None:
        return path, message
    if key in HYPERPARAMETERS and re.fullmatch(rf"(defaults|tasks\[\d+\])\.{key}", path):   # where it sets them
        path = key
    return path, f"{message} (from the command-line override {keys[key]})"


def check_local_paths(spec: ExperimentSpec) -> None:
    """Paths written as filesystem paths (absolute, ./, ../, ~) must exist before any trial starts;
    other values may be hub ids (`bert-base-uncased`, `google/mt5-base`). Each task's local data folder
    must hold the files its loader needs (`embinit.tasks.load.check_files`), and each local word-vector file
    must read (embinit.spec.vector_files). Every problem is listed."""
    from embinit.spec.vector_files import vector_file_problems
    problems, missing = missing_paths(spec.paths())
    problems += data_problems(spec, missing) + vector_file_problems(spec.paths())
    if problems:
        raise SpecError(problems)


# Folders a sweep makes when they do not exist yet: they need not exist, but must be (or become) folders.
MADE_ON_DEMAND = ("cache_dir", "analyses.similarity.snapshot_dir")


def missing_paths(pairs: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[Path]]:
    """((where, problem) for each filesystem path of `pairs` (field path, value) that does not exist, or,
    for a folder made on demand, that cannot be that folder; every missing value as a Path (hub ids too,
    for `data_problems`))."""
    problems, missing = [], []
    for where, value in pairs:
        path = Path(value).expanduser()
        if where in MADE_ON_DEMAND:
            problems += [(where, problem)] if (problem := folder_problem(path, value)) else []
        if path.exists():
            continue
        missing.append(path)
        if where not in MADE_ON_DEMAND and value.startswith(("/", "./", "../", "~")):
            problems.append((where, f"{value!r} does not exist"))
    return problems, missing


def data_problems(spec: ExperimentSpec, missing: list[Path] = (), advice: DataAdvice | None = None
                  ) -> list[tuple[str, str]]:
    """(where, problem) for each task whose local data folder is no folder or lacks a file its loader
    reads. A folder under one of `missing` (paths already reported) is not reported twice. `advice`: how
    the caller gives a task its data where it has none (`embinit.tasks.hub.DataAdvice`; the command
    line's by default)."""
    from embinit.spec.planning import trial_config

    problems = []
    for i, task in enumerate(spec.tasks):
        cfg = trial_config(spec, task, spec.inits[0], spec.seeds[0])
        if cfg.data_revision is not None and cfg.data_dir is None:   # a pinned hub dataset: no folder read
            continue
        where = f"tasks[{i}].data_dir" if task.data_dir else ("data_dir" if spec.data_dir else f"tasks[{i}]")
        root = str(Path(cfg.data_dir).parent) if where == "data_dir" and cfg.data_dir else None
        problems += task_files_problem(task.task, cfg.data_dir, cfg.extras, missing, where, advice, root, i)
    return problems


def offline_data_problems(spec: ExperimentSpec) -> list[tuple[str, str]]:
    """With Hugging Face kept offline, each task entry's `data_revision` whose snapshot of the task's hub
    dataset this machine's hub cache lacks (the revision asked and what the cache holds), as a model's
    pin is refused: every trial of the task would fail. Online, the trials fetch it."""
    from embinit.errors import offline_miss
    from embinit.task_registry import task_entry
    from embinit.tasks.hub import pinned_id
    return [(f"tasks[{i}].data_revision", why) for i, task in enumerate(spec.tasks)
            if task.data_revision is not None and task.data_dir is None and task_entry(task.task).hub is not None
            and (why := offline_miss(pinned_id(task.task, task.data_revision), "dataset")) is not None]


def task_files_problem(task: str, folder: str | None, extras: dict | None, missing: list[Path], where: str,
                       advice: DataAdvice | None = None, root: str | None = None,
                       index: int = 0) -> list[tuple[str, str]]:
    """[(where, what `task`'s loader would refuse about `folder`)] or []; nothing for a folder under one
    of `missing` (a path already reported). `root`: the spec's data_dir `folder` is `<root>/<task>` of
    (tasks[`index`] sets none), named as what it is when it has no such folder."""
    from embinit.errors import EmbinitError
    from embinit.tasks.hub import CLI_ADVICE
    from embinit.tasks.load import check_files

    if folder is not None and any(Path(folder).expanduser().is_relative_to(m) for m in missing):
        return []
    extras = extras or {}
    if root is not None and folder is not None and not Path(folder).expanduser().is_dir():
        return [(where, _no_task_folder(task, root, index, extras))]
    try:
        check_files(task, folder, extras.get("train_split"), extras.get("eval_split"), advice or CLI_ADVICE)
    except EmbinitError as e:
        return [(where, str(e))]
    return []


def _named_otherwise(task: str, root: Path) -> Path | None:
    """A folder in `root` named as `task` but for case and punctuation (GLUE's SST-2/ for sst2, MNLI/ for
    mnli), else None."""
    def plain(name: str) -> str:
        return "".join(c for c in name.lower() if c.isalnum())
    found = [p for p in root.iterdir() if p.is_dir() and p.name != task and plain(p.name) == plain(task)] \
        if root.is_dir() else []
    return sorted(found)[0] if found else None


def _no_task_folder(task: str, root: str, index: int, extras: dict) -> str:
    """The spec's data_dir has no folder for `task`: what a spec's data_dir is (the folder holding one
    folder per task), where a task's own folder goes instead (`embinit train --data-dir` takes that one),
    and, when `root` is itself the task's folder (one level too deep), its parent."""
    from embinit.errors import EmbinitError
    from embinit.tasks.load import check_files

    text = (f"{task}: data_dir {root!r} has no folder {task}/: a spec's data_dir is the folder that holds one "
            f"folder per task (like $EMBINIT_DATA_DIR), e.g. {str(Path(root) / task)!r}; a task's own folder goes "
            f"in its entry, tasks[{index}].data_dir (the folder `embinit train --data-dir` takes)")
    if (other := _named_otherwise(task, Path(root).expanduser())) is not None:
        return (text + f". It holds {other.name}/, the task's folder under another name (GLUE's download names them "
                f"SST-2/, MNLI/): link it as "
                f"{task} (ln -s {other.name} {Path(root) / task}) or set tasks[{index}].data_dir: {other}")
    try:
        check_files(task, root, extras.get("train_split"), extras.get("eval_split"))
    except EmbinitError:
        return text
    parent = str(Path(root).expanduser().parent)
    return (text + f". {root!r} itself holds {task}'s files: give its parent {parent!r} as data_dir, or "
            f"set tasks[{index}].data_dir: {root}")
