"""Command-line overrides of a spec (`embinit run SPEC epochs=2 seeds=2 inits=xavier,glove`), in the
style of torchtune's `key=value` arguments: shrink a study to smoke-test it without copying its file.

- a hyperparameter (`epochs`, `lr`, `d_model`, ...: `config.HYPERPARAMETERS`) is set for every task: in
  `defaults` and in each task entry that fixes it;
- `inits=a,b` / `tasks=a,b` keep the spec's entries of those names (an init by its label, exactly, or
  else by its init spec, case-insensitive; a task by its name), in that order; a name the spec lacks is
  added as written;
- `seeds=2` (a count), `seeds=0,3` or `seeds=[0,3]`; `name` and `mlflow.experiment` must not be empty;
  any other spec field by name or dotted path
  (`search.num_samples=2`, `mlflow.experiment=try`).
Values are YAML (`lr=1e-3`, `pos_encoding=false`). The result is validated like any spec; a key that
is neither a spec field nor a hyperparameter is a problem naming it. Unless the overrides name the
experiment, the MLflow experiment gets a suffix made of them, so a shrunk study never mixes into the
real one's report.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

import yaml

from embinit.config import HYPERPARAMETERS
from embinit.errors import did_you_mean
from embinit.spec.yaml_text import SpecLoader, yaml_error

LIST_FIELDS = ("inits", "tasks")
NAMES = ("name", "mlflow.experiment")   # empty, mlflow.experiment would silently fall back to the name


def _scalar(text: str) -> Any:
    """One item of a comma-separated value (`seeds=0,3`): its YAML value, else the text as written."""
    value, problem = _value(text)
    return text if problem or not text.strip() else value


def _value(raw: str) -> tuple[Any, str | None]:
    """(the YAML value of an override's right side, or a problem): read like a spec file, so a key given
    twice (`search='{lr: 1, lr: 2}'`) is a problem, not the last one kept; text that is not YAML at all
    (`name=a: b: c`) stays the text as written."""
    if not raw.strip():
        return None, None
    try:
        return yaml.load(raw, Loader=SpecLoader), None
    except yaml.constructor.ConstructorError as e:   # a key given twice, or a tag the safe loader refuses
        return None, yaml_error(e)
    except yaml.YAMLError:
        return raw, None


def parse(items: list[str]) -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
    """([(key, value)], problems) of `key=value` strings."""
    pairs, problems = [], []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            problems.append((item, f"an override is KEY=VALUE (e.g. epochs=2), got {item!r}"))
            continue
        value, problem = _value(raw)
        if problem:
            problems.append((key.strip(), f"{item!r}: {problem}"))
            continue
        if key.strip() in dict(pairs):
            problems.append((key.strip(), f"{key.strip()} is overridden twice ({key.strip()}="
                             f"{dict(pairs)[key.strip()]!r}, then {item!r}); give it once"))
            continue
        pairs.append((key.strip(), value))
    return pairs, problems


def given_empty(items: list[str], key: str) -> bool:
    """Whether the override of `key` was written with nothing after `=` (`epochs=`), not as `null`."""
    return any(k.strip() == key and not raw.strip() for k, _, raw in (i.partition("=") for i in items))


def _names(value: Any) -> list[str]:
    return [str(v).strip() for v in (value.split(",") if isinstance(value, str) else value or []) if str(v).strip()]


def _entry_names(entry: Any) -> set[str]:
    """The names an init or task entry answers to (lower case)."""
    if isinstance(entry, str):
        return {entry.lower()}
    if not isinstance(entry, dict):
        return set()
    names = {str(entry[k]).lower() for k in ("task", "label", "init", "name") if isinstance(entry.get(k), str)}
    tgt = entry.get("tgt")
    if isinstance(tgt, str):   # `{tgt: glove+standardize, src: xavier}` answers to `glove+standardize`
        names.add(tgt.lower())
    elif isinstance(tgt, dict):
        names |= {str(tgt[k]).lower() for k in ("name", "source") if isinstance(tgt.get(k), str)}
    return names


def _labels(entry: Any) -> set[str]:
    """The labels (lower case) an init entry's trials take (`InitEntry.label_for`: with and without a
    source table), empty when the entry alone does not validate (validation names its problem later)."""
    from embinit.spec.inits import InitEntry   # no torch
    try:
        init = InitEntry.model_validate(InitEntry.shorthand(entry))
    except Exception:
        return set()
    return {init.label_for(True).lower(), init.label_for(False).lower()}


def _init(entry: Any) -> str | None:
    """The canonical init string (`glove+standardize`) of a name or of an entry's target side, if it is one."""
    from embinit.spec.inits import init_string   # no torch
    try:
        side = entry.get("tgt", entry) if isinstance(entry, dict) and {"tgt", "src"} & set(entry) else entry
        return init_string(side)
    except Exception:  # not an init spec (a task's entry, a label): other names suffice
        return None


def select(entries: list[Any], wanted: list[str]) -> list[Any]:
    """The spec's entries named in `wanted`, in that order; unknown names as written (validated later).
    A name is, first, the label an entry's trials take (`glove_xavier`, `GloVe oov=zeros`): exactly the
    entry of that label, so `glove` is the plain GloVe entry, not also `{source: glove, oov: zeros}`, whose
    label is `GloVe oov=zeros`; else an init string: the entries whose target side is that init
    (`glove+standardize` is the spec's `{tgt: glove+standardize, src: xavier}`, with its source side, not a
    bare init that would also initialize the source table; `glove` with no GloVe-labelled entry: each GloVe
    entry, whatever its OOV rule); else a name the entry gives (a task's)."""
    out = []
    for name in wanted:
        init = _init(name)
        hit = [e for e in entries if name.lower() in _labels(e)]
        hit = hit or [e for e in entries if init is not None and _init(e) == init]
        hit = hit or [e for e in entries if name.lower() in _entry_names(e)]
        out += hit or [name]
    return out


def _set_path(data: dict, path: str, value: Any) -> str | None:
    """Set a dotted path; the problem's text when a part of it is not a mapping."""
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            return f"{part!r} in {path!r} is not a mapping"
    node[parts[-1]] = value
    return None


def _set_hyperparameter(data: dict, key: str, value: Any) -> None:
    data.setdefault("defaults", {})[key] = value
    for task in data.get("tasks") or []:
        if isinstance(task, dict) and key in task:
            task[key] = value


SUFFIX_MAX = 60   # a longer suffix is cut, and a hash of the full overrides keeps it unique


def suffix(pairs: list[tuple[str, Any]]) -> str:
    """`epochs=2 inits=xavier,glove` -> `epochs2-inits_xavier_glove` (an experiment-name suffix).

    One over SUFFIX_MAX characters is cut and ends in 8 hex digits of a hash of the whole overrides
    (`...-max_tr-3f2a9c01`), so overrides that differ past the cut (`max_train_examples=600` and `=700`)
    name different experiments; a suffix within the limit is unchanged, so the experiments that existing
    names identify keep them."""
    text = "-".join(f"{k}{v if not isinstance(v, (list, tuple)) else '_'.join(map(str, v))}".replace(",", "_")
                    for k, v in pairs)
    clean = re.sub(r"[^A-Za-z0-9_.\-]", "", text)
    if len(clean) <= SUFFIX_MAX:
        return clean
    digest = hashlib.sha256(repr(pairs).encode("utf-8")).hexdigest()[:8]
    return f"{clean[:SUFFIX_MAX - len(digest) - 1]}-{digest}"


def apply(data: dict[str, Any], items: list[str], spec_fields: set[str]) -> tuple[dict, list[tuple[str, str]]]:
    """(the spec data with `items` applied, problems). `spec_fields`: the spec's top-level fields."""
    pairs, problems = parse(items)
    out = copy.deepcopy(data)
    given = dict(pairs)
    for key, value in pairs:
        top = key.split(".", 1)[0]
        if value is None and key not in (*NAMES, "seeds") and given_empty(items, key):   # those say more
            problems.append((key, f"{key}= has no value; give one ({key}=VALUE), or null to unset it"))
            continue
        if top == "defaults" and (name := key.removeprefix("defaults.")) in HYPERPARAMETERS:
            if name in given:
                problems.append((key, f"{name} is overridden twice ({key}={value!r}, then {name}={given[name]!r}); "
                                      "give it once"))
                continue
            fixed = [f"tasks[{i}] ({t.get('task')}) sets {name}: {t[name]!r}"
                     for i, t in enumerate(out.get("tasks") or []) if isinstance(t, dict) and name in t]
            if fixed:
                problems.append((key, f"{key} would not reach every task: {'; '.join(fixed)}; override "
                                      f"{name}={value!r} to set it for every task"))
                continue
        if key == "seeds" and isinstance(value, str) and "," in value:   # seeds=0,3 as inits=a,b
            value = [_scalar(v) for v in value.split(",")]
        if key in NAMES and (value is None or not str(value).strip()):
            hint = "leave the override out to log to the spec's name" if key != "name" else "give a name"
            problems.append((key, f"{key} must not be empty; {hint}"))
            continue
        if key in LIST_FIELDS and isinstance(value, list) and any(isinstance(v, dict) for v in value):
            out[key] = value   # whole entries (`tasks=[{task: sst2, epochs: 4}]`), not names to keep
        elif key in LIST_FIELDS:
            out[key] = select(out.get(key) or [], _names(value))
        elif key in HYPERPARAMETERS:
            _set_hyperparameter(out, key, value)
        elif top in spec_fields:
            problem = _set_path(out, key, value)
            if problem:
                problems.append((key, problem))
        else:
            hint = did_you_mean(top, {*spec_fields, *HYPERPARAMETERS})   # as a misspelt field in a spec file
            problems.append((key, f"{key!r} is neither a spec field nor a hyperparameter{hint or ';'} spec fields: "
                                  f"{sorted(spec_fields)}; hyperparameters: {sorted(HYPERPARAMETERS)}"))
    if pairs and not any(k in ("name", "mlflow.experiment") or k == "mlflow" for k, _ in pairs):
        mlflow = out.setdefault("mlflow", {})
        if isinstance(mlflow, dict):
            base = mlflow.get("experiment") or out.get("name") or "spec"
            mlflow["experiment"] = f"{base}-{suffix(pairs)}"
    return out, problems
