"""Tasks defined in a spec (`define_tasks:`): a researcher's own data as a task of a built-in kind, with
no code. A definition names a built-in task it is `like` (its kind, its defaults, its metric names and
report rules) and says how its files look:

    define_tasks:
      imdb:
        like: sst2
        files: {train: train.csv, dev: test.csv}   # the like-task's splits -> a file in data_dir
        format: csv                                # csv | tsv | jsonl (classification); default: the suffix
        columns: [review, sentiment]               # the text column(s), then the label column
        labels: [negative, positive]               # the label values as written, in id order
        epochs: 3                                  # any of OVERRIDABLE: the like-task's default otherwise
      fr_en:
        like: multi30k
        languages: [fr, en]                        # files <stem>.fr and <stem>.en
        files: {train: train, val: dev, test: test}

A definition travels with each of its trials (`TrialConfig.task_def`, in the trial key: a changed
definition is another trial) and is registered wherever a config holding it is made (`ensure`), in the
driver, a Ray worker, or a later `embinit report`, which reads it from the runs' config tags. Registered
definitions are marked (`task_registry.DEFINED`): a spec names one only by defining it. Torch-free.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import PurePosixPath
from typing import Any

from embinit.errors import EmbinitError, did_you_mean
from embinit.task_types import TaskEntry

FORMATS = ("csv", "tsv", "jsonl")
OVERRIDABLE = ("epochs", "batch_size", "lr", "min_freq", "layers", "heads", "ff_dim", "dropout", "d_model",
               "max_len")
FIELDS = ("like", "description", "files", "format", "columns", "labels", "label_names", "languages",
          *OVERRIDABLE)
KINDS = ("translation", "classification", "lm")


def _like(d: dict) -> TaskEntry | None:
    from embinit.task_registry import DEFINED, TASKS
    like = d.get("like")
    return TASKS[like] if isinstance(like, str) and like in TASKS and like not in DEFINED else None


def problems(name: str, d: Any) -> list[str]:
    """Everything wrong with definition `d` of task `name`, each prefixed `define_tasks.<name>`."""
    from embinit.task_registry import DEFINED, TASKS
    at = f"define_tasks.{name}"
    if not isinstance(d, dict):
        return [f"{at}: a definition is a mapping (like, files, ...), got {type(d).__name__}"]
    out = []
    if name in TASKS and name not in DEFINED:
        out.append(f"{at}: {name!r} is a built-in task; give the definition a name of its own")
    out += [f"{at}.{k}: unknown field; valid: {list(FIELDS)}{did_you_mean(str(k), FIELDS)}"
            for k in d if k not in FIELDS]
    builtin = sorted(t for t, e in TASKS.items() if t not in DEFINED and not e.generate and e.layout)
    entry = _like(d)
    if entry is None or entry.layout is None:
        return out + [f"{at}.like: {d.get('like')!r} is not a built-in task with files; one of {builtin}"
                      f"{did_you_mean(str(d.get('like')), builtin)}"]
    kind, layout = entry.kind, entry.layout
    files = d.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, str) and v for v in files.values()):
        out.append(f"{at}.files: a mapping of split -> file name, for the splits {list(layout.files)}")
    else:
        out += [f"{at}.files.{s}: {kind} task {d['like']!r} has no split {s!r}; its splits: {list(layout.files)}"
                for s in files if s not in layout.files]
        needed = ["train", *layout.eval_splits[:1]] if kind != "lm" else list(layout.files)
        out += [f"{at}.files: the split {s!r} is needed" for s in needed if s not in files]
        out += [f"{at}.files.{s}: {v!r} must be a file name in data_dir, not a path"
                for s, v in files.items() if PurePosixPath(v).name != v or v in (".", "..")]
    out += _kind_problems(at, kind, d)
    for k in OVERRIDABLE:
        if k in d and (isinstance(d[k], bool) or not isinstance(d[k], (int, float)) or d[k] <= 0
                       or (k != "lr" and k != "dropout" and not isinstance(d[k], int))):
            out.append(f"{at}.{k}: {d[k]!r} is not a valid {k}")
    if "description" in d and not isinstance(d["description"], str):
        out.append(f"{at}.description: a string")
    return out


def _strings(v: Any, n: int | None = None) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x for x in v) and (n is None or len(v) == n) \
        and len(set(v)) == len(v)


def _kind_problems(at: str, kind: str, d: dict) -> list[str]:
    out = []
    if kind == "classification":
        fmt = d.get("format")
        if fmt is not None and fmt not in FORMATS:
            out.append(f"{at}.format: {fmt!r}; one of {list(FORMATS)}")
        elif fmt is None and isinstance(d.get("files"), dict):
            out += [f"{at}.format: not given, and {v!r} ends in none of {['.' + f for f in FORMATS]}"
                    for v in d["files"].values() if isinstance(v, str) and _suffix(v) not in FORMATS][:1]
        if not (_strings(d.get("columns")) and 2 <= len(d["columns"]) <= 3):
            out.append(f"{at}.columns: 1 or 2 text columns, then the label column (distinct names)")
        if not (_strings(d.get("labels")) and len(d["labels"]) >= 2):
            out.append(f"{at}.labels: the label values as written in the files, in id order (at least 2)")
        if "label_names" in d and not _strings(d["label_names"], len(d.get("labels") or [])):
            out.append(f"{at}.label_names: one distinct name per label")
    else:
        out += [f"{at}.{k}: classification only" for k in ("format", "columns", "labels", "label_names") if k in d]
    if kind == "translation":
        if "languages" in d and not (_strings(d["languages"], 2)):
            out.append(f"{at}.languages: [source, target] file suffixes, e.g. [fr, en]")
    elif "languages" in d:
        out.append(f"{at}.languages: translation only")
    return out


def _suffix(name: str) -> str:
    return PurePosixPath(name).suffix.lstrip(".").lower()


def canonical(d: dict) -> dict:
    """The definition as it is keyed and recorded: its fields in a fixed order, the format resolved, the
    description dropped (it changes no result)."""
    out = {k: d[k] for k in FIELDS if k in d and k != "description"}
    like = _like(d)
    if like is not None and like.kind == "classification" and "format" not in out:
        out["format"] = _suffix(next(iter(d["files"].values())))
    return json.loads(json.dumps(out, sort_keys=True))


def entry(d: dict) -> TaskEntry:
    """The registry entry of a (valid) definition: the like-task's, with its own files and defaults."""
    base = _like(d)
    layout = base.layout
    files = {split: (name,) for split, name in d["files"].items()}
    src, tgt = d.get("languages") or (layout.src_lang, layout.tgt_lang)
    new_layout = dataclasses.replace(
        layout, files=files, eval_splits=tuple(s for s in layout.eval_splits if s in files), src_lang=src,
        tgt_lang=tgt, release=False,
        **({"columns": tuple(d["columns"]), "labels": tuple(d["labels"]),
            "label_names": tuple(d.get("label_names") or d["labels"]), "format": d.get("format") or
            _suffix(next(iter(files.values()))[0])} if base.kind == "classification" else {}))
    defaults = dataclasses.replace(base.defaults, description=d.get("description") or f"defined like {d['like']}",
                                   **{k: d[k] for k in OVERRIDABLE if k in d})
    return dataclasses.replace(base, defaults=defaults, layout=new_layout, hub=None,
                               definition=json.dumps(canonical(d), sort_keys=True))


def ensure(name: str, d: dict) -> None:
    """Register definition `d` as task `name` in this process, or replace an earlier definition of that
    name (each config carries its own, so the last one made is the one its trial reads); an invalid one is
    an error listing its problems."""
    from embinit.task_registry import DEFINED, TASKS
    found = problems(name, d)
    if found:
        raise EmbinitError("; ".join(found))
    e = entry(d)
    if name in TASKS and name in DEFINED and TASKS[name].definition == e.definition:
        return
    TASKS[name] = e
    DEFINED.add(name)


def is_defined(task: str) -> bool:
    from embinit.task_registry import DEFINED
    return task in DEFINED

