"""Finished trials of a spec's experiment that running the spec does not reuse: their trial keys are not
planned, because the spec was edited since (`epochs: 8` -> `9`, another lr, an added transform). The dry
run and a run's start say how many and why: the config fields in which each differs from its nearest
planned trial (same task, then same init label and seed where the plan has them), grouped by the set of
differing fields, a few groups listed and the rest counted. Configs are compared as their keys are: a
file input (data_dir, pretrained, ...) by its content ("the content of data_dir"), not its path; no field
outside the key (a defined task's `description`, threads) is ever named.

Only finished runs (MLflow's FINISHED: finished or diverged) are said here; a failed or interrupted run of
a planned key is resumed and marked elsewhere (embinit.cli.dry_run_store.resumes). A finished run of a
task the spec does not plan is not said either: another spec sharing the experiment, or a task left out
on purpose, whose trials no run of this spec could reuse. Torch-free: the dry run needs no torch.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from embinit.config import CODE_VERSION, TrialConfig
from embinit.file_inputs import PREFIX
from embinit.path_keys import FILE_FIELDS
from embinit.tracking.records import RESULT, TrialRecord, by_key
from embinit.tracking.run_names import value_text

GROUPS_SHOWN = 4   # groups of differing fields listed; the others are counted
FIELDS_SHOWN = 4   # differing fields named per group
PAIRS_SHOWN = 3    # (old -> new) value pairs shown per field
VALUE_CHARS = 40   # a value longer than this (an `extras` mapping, a task definition) is cut
DIFF_CONTEXT = 16  # characters shown before the first difference of two long values a plain cut shows alike


@dataclasses.dataclass(frozen=True, eq=False)
class FileInput:
    """A file input as the key holds it: by its content (`sha256:...`); `path` is shown, not compared."""

    path: Any
    content: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileInput) and self.content == other.content

    __hash__ = None


_FIELDS = frozenset(f.name for f in dataclasses.fields(TrialConfig))


def compared(config: dict[str, Any], digests: dict[str, str] | None = None) -> dict[str, Any]:
    """A config as its key sees it (`TrialConfig.key_fields`): resolved, each unset hyperparameter at the
    task's default, without the fields outside the key (threads, device, a defined task's `description`),
    a file input (data_dir, pretrained, ...) by its content: `digests` (field -> hex, what a run tagged,
    `TrialRecord.file_digests`), else this machine's file's. Only config fields: what a key adds besides
    them (the code version, a scoring rule) follows from them or is said by `_unexplained`. A config this
    embinit cannot read (an older one's field, a task not registered here) is compared as it was stored."""
    try:
        keyed = TrialConfig.from_dict(config).key_fields()
    except Exception:   # EmbinitError, or a TypeError of a value the dataclass cannot take
        out = dict(config)
        for name in TrialConfig.NOT_IN_KEY:
            out.pop(name, None)
        return out
    keyed.update({name: PREFIX + hex_ for name, hex_ in (digests or {}).items() if name in keyed})
    out = {k: v for k, v in keyed.items() if k in _FIELDS}
    for name in FILE_FIELDS:
        if isinstance(out.get(name), str) and out[name].startswith(PREFIX):
            out[name] = FileInput(config.get(name), out[name])
    return out


def differences(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """field -> (old value, new value) for each field where the two compared configs differ."""
    return {k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}


def _slots(plan) -> dict[tuple, list[int]]:
    """Planned trials (their indices) by (task, label, seed), (task, seed), (task, label) and (task,)."""
    out: dict[tuple, list[int]] = {}
    for i, p in enumerate(plan):
        for slot in ((p.task, p.label, p.seed), (p.task, "seed", p.seed), (p.task, "label", p.label), (p.task,)):
            out.setdefault(slot, []).append(i)
    return out


def _why(rec: TrialRecord, configs: list[dict], slots: dict[tuple, list[int]]) -> dict[str, tuple] | None:
    """How `rec`'s config differs from the nearest planned trial's (the fewest differing fields among the
    most alike slot); None when the plan has no trial of its task."""
    old = compared(rec.config, rec.file_digests)
    for slot in ((rec.task, rec.label, rec.seed), (rec.task, "seed", rec.seed), (rec.task, "label", rec.label),
                 (rec.task,)):
        if slot in slots:
            diffs = (differences(old, configs[i]) for i in slots[slot])
            return min(diffs, key=len)
    return None


def _unexplained(rec: TrialRecord) -> dict[str, tuple]:
    """Why a key differs where the configs do not: the code version the run recorded, else nothing named
    (a rule of this embinit's keys, or a file input of a run that tagged no digest of it)."""
    if rec.code_version is not None and rec.code_version != CODE_VERSION:
        return {"code_version": (rec.code_version, CODE_VERSION)}
    return {}


def not_reused(plan, recs: list[TrialRecord]) -> dict[tuple[str, ...], list[dict[str, tuple]]]:
    """The experiment's finished trials (of `recs`, its trial records) whose keys `plan` lacks, grouped by
    the fields in which each differs from its nearest planned trial: sorted field names -> one
    (field -> (old, new)) per trial, largest group first. A key counts once (its newest finished run)."""
    planned = {p.key for p in plan}
    stale = [r for k, r in by_key(r for r in recs if r.status in RESULT).items() if k and k not in planned]
    if not stale:
        return {}
    configs = [compared(p.config) for p in plan]
    slots = _slots(plan)
    groups: dict[tuple[str, ...], list[dict]] = {}
    for rec in stale:
        why = _why(rec, configs, slots)
        if why is None:
            continue   # a task this spec does not plan
        why = why or _unexplained(rec)
        groups.setdefault(tuple(why), []).append(why)
    return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def _text(v: Any) -> str:
    """A value in full as a researcher wrote it: `0.15`, not `0.15000000000000002` (`run_names.value_text`);
    a file input's path."""
    if isinstance(v, FileInput):
        return "unset" if v.path is None else str(v.path)
    if isinstance(v, float):
        return value_text(v)
    return "unset" if v is None else v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)


def _value(v: Any) -> str:
    """`_text`, a long one cut: a file input's path keeps its end (which tells paths apart), anything else
    its start."""
    text = _text(v)
    if len(text) <= VALUE_CHARS:
        return text
    return "..." + text[3 - VALUE_CHARS:] if isinstance(v, FileInput) else text[:VALUE_CHARS - 3] + "..."


def _around(text: str, at: int) -> str:
    """`text` cut to about VALUE_CHARS characters from a little before position `at`."""
    if len(text) <= VALUE_CHARS:
        return text
    start = max(0, at - DIFF_CONTEXT)
    body = text[start:start + VALUE_CHARS - 6]
    return ("..." if start else "") + body + ("..." if start + len(body) < len(text) else "")


def _pair(old: Any, new: Any) -> str:
    """`old → new`, each as `_value` shows it; where that cut would show two differing values alike (two long
    paths with one end, two task definitions alike in their first characters, floats alike to 6 significant
    digits), both are cut around their first difference instead, floats shown in full."""
    a, b = _value(old), _value(new)
    full = (repr(old), repr(new)) if isinstance(old, float) and isinstance(new, float) else (_text(old), _text(new))
    if a == b and full[0] != full[1]:
        at = next((i for i, (x, y) in enumerate(zip(*full)) if x != y), min(map(len, full)))
        a, b = (_around(text, at) for text in full)
    return f"{a} → {b}"


def _field(name: str, whys: list[dict]) -> str:
    """`epochs (8 → 9)`: a field with its distinct (old → new) pairs, a few shown; a file input whose path
    is the same (its content differs) shows the path once."""
    content = all(isinstance(v, FileInput) for w in whys for v in w[name])   # same path or not: its bytes
    pairs = list(dict.fromkeys(_value(w[name][1]) if content and _text(w[name][0]) == _text(w[name][1])
                               else _pair(*w[name]) for w in whys))
    more = ", ..." if len(pairs) > PAIRS_SHOWN else ""
    return f"{'the content of ' if content else ''}{name} ({', '.join(pairs[:PAIRS_SHOWN])}{more})"


def _reason(fields: tuple[str, ...], whys: list[dict]) -> str:
    if not fields:
        return ("their config equals this spec's, but their keys differ in what a key holds besides it (a rule "
                "of this embinit's version, or a file input's content that their run did not record)")
    named = ", ".join(_field(f, whys) for f in fields[:FIELDS_SHOWN])
    more = f" and {len(fields) - FIELDS_SHOWN} more field{'s' if len(fields) - FIELDS_SHOWN != 1 else ''}" \
        if len(fields) > FIELDS_SHOWN else ""
    return f"their config differs from this spec's in {named}{more}"


def _trials(n: int) -> str:
    return f"{n} finished trial{'s' if n != 1 else ''}"


def notice_lines(experiment: str, plan, recs: list[TrialRecord]) -> list[str]:
    """What to say of the experiment's finished trials this plan does not reuse ([] when none): one line
    for one group of differing fields, else a head line and a line per group (a few, the rest counted)."""
    groups = not_reused(plan, recs)
    if not groups:
        return []
    total = sum(len(whys) for whys in groups.values())
    head = f"{_trials(total)} of experiment {experiment!r} in this store {'is' if total == 1 else 'are'} not reused"
    if len(groups) == 1:
        fields, whys = next(iter(groups.items()))
        return [f"{head}: {_reason(fields, whys)}"]
    shown = list(groups.items())[:GROUPS_SHOWN]
    lines = [f"{head}, by what differs from the nearest planned trial:"]
    lines += [f"  {len(whys)}: {_reason(fields, whys)}" for fields, whys in shown]
    rest = list(groups.values())[GROUPS_SHOWN:]
    if rest:
        n = sum(map(len, rest))
        lines.append(f"  and {n} more finished trial{'s' if n != 1 else ''}, in {len(rest)} other combination"
                     f"{'s' if len(rest) != 1 else ''} of fields")
    return lines
