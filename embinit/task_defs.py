"""Tasks defined in a spec (`define_tasks:`): a researcher's own data as a task of a built-in kind, with
no code. A definition names a built-in task it is `like` (its kind, its defaults, its metric names and
report rules) and says how its files look:

    define_tasks:
      imdb:
        like: sst2
        files: {train: train.csv, dev: test.csv}   # each of the like-task's splits -> a file in data_dir
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
import functools
import json
from pathlib import PurePosixPath
from typing import Any

from embinit import bounds
from embinit.errors import EmbinitError, did_you_mean
from embinit.task_types import TaskEntry

FORMATS = {"classification": ("csv", "tsv", "jsonl"), "lm": ("text", "jsonl")}   # the first: no suffix given
OVERRIDABLE = ("epochs", "batch_size", "lr", "min_freq", "layers", "heads", "ff_dim", "dropout", "d_model",
               "max_len")
FIELDS = ("like", "description", "files", "format", "columns", "labels", "label_names", "languages",
          *OVERRIDABLE)
KINDS = ("translation", "classification", "lm")
MAX_CHARS = 100_000   # a definition's JSON: each trial's config holds it (in MLflow tags of 8,000 characters)
LM_COLUMN = "text"   # a JSONL LM corpus's text key unless `columns` names another


def _like(d: dict) -> TaskEntry | None:
    from embinit.task_registry import DEFINED, TASKS
    like = d.get("like")
    return TASKS[like] if isinstance(like, str) and like in TASKS and like not in DEFINED else None


def problems(name: str, d: Any) -> list[tuple[str, str]]:
    """Everything wrong with definition `d` of task `name`: (path `define_tasks.<name>[.field]`, message)."""
    from embinit.task_registry import DEFINED, TASKS
    at = f"define_tasks.{name}"
    if not isinstance(d, dict):
        return [(at, f"a definition is a mapping (like, files, ...), got {type(d).__name__}")]
    out = []
    if name in TASKS and name not in DEFINED:
        out.append((at, f"{name!r} is a built-in task; give the definition a name of its own"))
    out += [(f"{at}.{k}", f"unknown field; valid: {list(FIELDS)}{did_you_mean(str(k), FIELDS)}")
            for k in d if k not in FIELDS]
    builtin = sorted(t for t, e in TASKS.items() if t not in DEFINED and not e.generate and e.layout)
    entry = _like(d)
    if entry is None or entry.layout is None:
        return out + [(f"{at}.like", f"{d.get('like')!r} is not a built-in task with files; one of {builtin}"
                                     f"{did_you_mean(str(d.get('like')), builtin)}")]
    out += _file_problems(at, entry, d.get("files"), d["like"])
    out += _stem_problems(at, entry, d)
    out += _kind_problems(at, entry.kind, d)
    for k in OVERRIDABLE:   # the bounds a spec's own value of `k` has (embinit.bounds; a service caps some further)
        if k in d and (isinstance(d[k], bool) or not isinstance(d[k], (int, float))
                       or (k != "lr" and k != "dropout" and not isinstance(d[k], int))):
            out.append((f"{at}.{k}", f"{d[k]!r} is not a valid {k}"))
        elif k in d and bounds.problem(k, d[k]):
            out.append((f"{at}.{k}", bounds.problem(k, d[k])))
    if "description" in d and not isinstance(d["description"], str):
        out.append((f"{at}.description", "a string"))
    if (size := len(json.dumps(d, default=str))) > MAX_CHARS:
        out.append((at, f"the definition is {size:,} characters of JSON; at most {MAX_CHARS:,} (it travels "
                        f"in every trial's config)"))
    return out


def _file_problems(at: str, entry: TaskEntry, files: Any, like: str) -> list[tuple[str, str]]:
    layout, kind = entry.layout, entry.kind
    if not isinstance(files, dict) or not files or not all(isinstance(v, str) and v for v in files.values()):
        return [(f"{at}.files", f"a mapping of split -> file name in data_dir, for the splits {list(layout.files)}")]
    out = [(f"{at}.files.{s}", f"{kind} task {like!r} has no split {s!r}; its splits: {list(layout.files)}")
           for s in files if s not in layout.files]
    # Every evaluation split too: the report reads the like-task's metrics by name (`test/bleu` needs a test
    # split; an MNLI-like classifier with one dev split would name its accuracy `val/acc`, not `val/acc_matched`),
    # so a definition without one trains trials whose rows read n = 0.
    needed = ["train", *layout.eval_splits] if kind != "lm" else list(layout.files)
    why = f": {like!r} reports {list(entry.reported)} from its evaluation splits {list(layout.eval_splits)}"
    out += [(f"{at}.files", f"the split {s!r} is needed" + (why if s in layout.eval_splits else ""))
            for s in needed if s not in files]
    out += [(f"{at}.files.{s}", f"{v!r} must be a file name in data_dir, not a path")
            for s, v in files.items() if PurePosixPath(v).name != v or v in (".", "..")]
    return out


def _stem_problems(at: str, entry: TaskEntry, d: dict) -> list[tuple[str, str]]:
    """A translation file given with its language suffix (`train.fr`), which would be read as `train.fr.fr`."""
    files = d.get("files")
    if entry.kind != "translation" or not isinstance(files, dict):
        return []
    langs = d["languages"] if _strings(d.get("languages"), 2) else [entry.layout.src_lang, entry.layout.tgt_lang]
    return [(f"{at}.files.{s}", f"{v!r} ends in .{PurePosixPath(v).suffix[1:]}: give the stem "
                                f"{PurePosixPath(v).stem!r}, read as <stem>.{langs[0]} and <stem>.{langs[1]}")
            for s, v in files.items() if isinstance(v, str) and PurePosixPath(v).suffix[1:] in langs]


def _strings(v: Any, n: int | None = None) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x for x in v) and (n is None or len(v) == n) \
        and len(set(v)) == len(v)


def _labels(v: Any) -> list[str] | None:
    """Label values as written (YAML's `[0, 1]` reads as the labels "0" and "1"), None if not such a list."""
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, (str, int)) for x in v):
        return None
    return [str(x) for x in v]


def _kind_problems(at: str, kind: str, d: dict) -> list[tuple[str, str]]:
    out = []
    formats = FORMATS.get(kind, ())
    fmt = d.get("format")
    if "format" in d and not formats:
        out.append((f"{at}.format", f"{kind} files are read as <stem>.<language>; no format"))
    elif fmt is not None and fmt not in formats:
        out.append((f"{at}.format", f"{fmt!r}; one of {list(formats)}"))
    elif fmt is None and kind == "classification" and isinstance(d.get("files"), dict):
        suffixes = {_suffix(v) for v in d["files"].values() if isinstance(v, str)}
        if not suffixes <= set(formats):
            out.append((f"{at}.format", f"not given, and the files {list(d['files'].values())} do not all end "
                                        f"in one of {['.' + f for f in formats]}"))
        elif len(suffixes) > 1:
            out.append((f"{at}.format", f"not given, and the files end in {sorted(suffixes)}: one format for all"))
    if kind == "classification":
        if not (_strings(d.get("columns")) and 2 <= len(d["columns"]) <= 3):
            out.append((f"{at}.columns", "1 or 2 text columns, then the label column (distinct names)"))
        labels = _labels(d.get("labels"))
        if "labels" in d and not (labels and len(set(labels)) == len(labels) >= 2 and all(labels)):
            out.append((f"{at}.labels", "the label values as written in the files, in id order (at least 2, "
                                        "distinct); leave it out for the train file's values, sorted"))
        if "label_names" in d and "labels" not in d:
            # the names follow `labels`' order; left out, the labels are the train file's, known only once
            # a trial reads it: names given without them could not be checked, nor matched up by the reader
            out.append((f"{at}.label_names", "needs `labels` written out beside it: the label values as written "
                                             "in the files, in id order, which the names follow one for one "
                                             "(e.g. labels: [\"0\", \"1\"] with label_names: [neg, pos])"))
        elif "label_names" in d and not (labels and _strings(d["label_names"], len(labels))):
            out.append((f"{at}.label_names", "one distinct name per label of `labels`"))
    else:
        out += [(f"{at}.{k}", "classification only") for k in ("labels", "label_names") if k in d]
    if kind == "lm" and "columns" in d and (_format(d) != "jsonl" or not _strings(d["columns"], 1)):
        out.append((f"{at}.columns", f"a JSONL corpus's text key, one (default {[LM_COLUMN]}); text files have none"))
    elif kind == "translation" and "columns" in d:
        out.append((f"{at}.columns", "classification and JSONL language-model corpora only"))
    if kind == "translation":
        if "languages" in d and not (_strings(d["languages"], 2)):
            out.append((f"{at}.languages", "[source, target] file suffixes, e.g. [fr, en]"))
    elif "languages" in d:
        out.append((f"{at}.languages", "translation only"))
    return out


def _suffix(name: str) -> str:
    return PurePosixPath(name).suffix.lstrip(".").lower()


def _format(d: dict) -> str | None:
    """The format files are read in: the definition's, else the first file's suffix where it names one of
    the kind's formats, else the kind's first (classification: csv; lm: text); None for translation."""
    like = _like(d)
    formats = FORMATS.get(like.kind, ()) if like is not None else ()
    if not formats:
        return None
    if d.get("format"):
        return d["format"]
    files = d.get("files") if isinstance(d.get("files"), dict) else {}
    suffix = _suffix(str(files.get("train") or next(iter(files.values()), "")))
    return suffix if suffix in formats else formats[0]


def canonical(d: dict) -> dict:
    """The definition as it is keyed and recorded: its fields in a fixed order, the format resolved (a
    text LM corpus's left out, as before JSONL corpora were read), labels as strings, the description
    dropped (it changes no result)."""
    out = {k: d[k] for k in FIELDS if k in d and k != "description"}
    fmt = _format(d)
    if fmt is not None and "format" not in out and fmt != "text":
        out["format"] = fmt
    if _labels(out.get("labels")) is not None:
        out["labels"] = _labels(out["labels"])
    return json.loads(json.dumps(out, sort_keys=True))


def entry(d: dict) -> TaskEntry:
    """The registry entry of a (valid) definition: the like-task's, with its own files and defaults. A
    classification definition without `labels` has none in its layout: the reader takes its train file's
    (embinit.tasks.labelled.derive_labels)."""
    base = _like(d)
    layout = base.layout
    files = {split: (name,) for split, name in d["files"].items()}
    src, tgt = d.get("languages") or (layout.src_lang, layout.tgt_lang)
    fields: dict[str, Any] = {"src_lang": src, "tgt_lang": tgt, "release": False}
    if base.kind == "classification":
        labels = tuple(_labels(d.get("labels")) or ())
        fields.update(columns=tuple(d["columns"]), labels=labels, label_names=tuple(d.get("label_names") or labels),
                      format=_format(d))
    elif base.kind == "lm":
        fields.update(format=_format(d), columns=tuple(d.get("columns") or [LM_COLUMN]))
    new_layout = dataclasses.replace(layout, files=files,
                                     eval_splits=tuple(s for s in layout.eval_splits if s in files), **fields)
    defaults = dataclasses.replace(base.defaults, description=d.get("description") or f"defined like {d['like']}",
                                   **{k: d[k] for k in OVERRIDABLE if k in d})
    return dataclasses.replace(base, defaults=defaults, layout=new_layout, hub=None,
                               definition=json.dumps(canonical(d), sort_keys=True))


@functools.lru_cache(maxsize=256)
def _entry_of(task: str, text: str) -> TaskEntry | None:
    """The entry of definition `text` (JSON) of `task`, None for an invalid one: configs are made again
    and again (a report resolves every trial's, ~0.1 ms a check), and each definition is checked once."""
    d = json.loads(text)
    return None if problems(task, d) else entry(d)


def ensure(name: str, d: dict) -> None:
    """Register definition `d` as task `name` in this process (or the scope, `task_registry.scoped`), or
    replace an earlier definition of that name (each config carries its own, so the last one made is the
    one its trial reads); an invalid one is an error listing its problems."""
    from embinit.task_registry import DEFINED, TASKS, define
    e = _entry_of(name, json.dumps(d, sort_keys=True, default=str))
    if e is not None and TASKS.get(name) is e:
        return
    if e is None:
        raise EmbinitError("; ".join(f"{path}: {msg}" for path, msg in problems(name, d)))
    if not (name in TASKS and name in DEFINED and TASKS[name].definition == e.definition):
        define(name, e)


def entry_of(task: str, definition: Any = None) -> TaskEntry | None:
    """The registry entry a trial of `task` read: the one of its definition where its config holds one
    (whichever definition of the name this process registered last: a report over two sweeps that
    defined one name differently reads each trial's own), else the registered task's; None for an
    unknown task or an invalid definition."""
    from embinit.task_registry import TASKS
    if isinstance(definition, dict):
        return _entry_of(task, json.dumps(definition, sort_keys=True, default=str))
    return TASKS.get(task)
