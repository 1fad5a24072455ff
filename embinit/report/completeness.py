"""How much of a planned experiment has a result: the planned trials that never finished (cancelled,
failed, still running, never started) and the inits with no finished trial at all.

The plan is the sweep's (`ExperimentSpec.plan`); the service and the sweep know it, `embinit report`
reads it from the newest sweep run's `spec.yaml` artifact. Without a plan there is nothing to say.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Iterable

from embinit.config import within
from embinit.tracking.records import RESULT, TrialRecord, stand_ins

NEVER_STARTED = "never started"


def planned_trials(plan: Iterable[Any]) -> list[dict[str, Any]]:
    """`PlannedTrial`s as plain dicts: key, task, label, axes, search point, seed and config."""
    return [{"key": p.key, "task": p.task, "label": p.label, "axes": p.axes, "point": p.point, "seed": p.seed,
             "config": p.config} for p in plan]


def planned_configs(planned: list[dict[str, Any]] | None) -> dict[tuple, dict[str, Any]]:
    """(task, label, axes json) -> the config of its first planned trial (with one), so that a planned init
    none of whose trials started still says what its label stands for (its source table: notes.py)."""
    out: dict[tuple, dict[str, Any]] = {}
    for p in planned or []:
        if p.get("config"):
            out.setdefault((p["task"], p["label"], json.dumps(p["axes"], sort_keys=True)), p["config"])
    return out


def _slot(task: str, label: str, axes: Any, point: Any, seed: Any) -> str:
    return json.dumps([task, label, axes, point, seed], sort_keys=True, default=str)


def _statuses(planned: list[dict[str, Any]], trials: dict[str, TrialRecord]) -> list[str]:
    """Each planned trial's status: its key's record, else the record `records.stand_ins` chooses among
    those of the same task, init, axes, search point and seed (the same trial under another key, e.g. one
    an older version keyed)."""
    by_slot = stand_ins(trials.values(), lambda t: _slot(t.task, t.label, t.axes, t.point, t.config.get("seed")))
    # by the planned axes only: a trial planned without an axis that does nothing for its init
    # (`planning.moot_axes`) stands for the runs an older plan made at each of its values
    narrowed: dict[tuple, dict] = {}
    out = []
    for p in planned:
        slot = _slot(p["task"], p["label"], p["axes"], p.get("point", {}), p.get("seed"))
        rec = trials[p["key"]] if p["key"] in trials else by_slot.get(slot)
        if rec is None:
            names = tuple(sorted(p["axes"]))
            if names not in narrowed:
                narrowed[names] = stand_ins(trials.values(), lambda t, names=names: _slot(
                    t.task, t.label, {k: v for k, v in t.axes.items() if k in names}, t.point, t.config.get("seed")))
            rec = narrowed[names].get(slot)
        out.append(rec.status if rec is not None else NEVER_STARTED)
    return out


def never_started(planned: list[dict[str, Any]] | None, trials: dict[str, TrialRecord]) -> dict[tuple, int] | None:
    """(task, label, axes json) -> how many of its planned trials (every search point) never started:
    `completeness`'s "never started", per report row; None without a plan."""
    if not planned:
        return None
    out: Counter = Counter()
    for p, s in zip(planned, _statuses(planned, trials)):
        out[p["task"], p["label"], json.dumps(p["axes"], sort_keys=True)] += s == NEVER_STARTED
    return dict(out)


def points_outside(planned: list[dict[str, Any]] | None, task: str, label: str, axes: dict[str, Any],
                   point: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The search points the plan gives (task, label, axes) when `point` (a row's) is not one of them,
    else None (also without a plan, or a row with no point): the row's point is an earlier, wider grid's
    of the same experiment, which still competes for the best point."""
    if not planned or not point:
        return None
    mine = [p["point"] for p in planned if (p["task"], p["label"], json.dumps(p["axes"], sort_keys=True))
            == (task, label, json.dumps(axes, sort_keys=True))]
    if not mine or point in mine:
        return None
    return list({json.dumps(p, sort_keys=True): p for p in mine}.values())


def completeness(planned: list[dict[str, Any]] | None, trials: dict[str, TrialRecord]) -> dict[str, Any] | None:
    """planned, finished, unfinished (with their statuses) and the (task, init) pairs with no finished
    trial; None without a plan. `trials`: the experiment's record per trial key (`records.by_key`)."""
    if not planned:
        return None
    statuses = _statuses(planned, trials)
    status = Counter(statuses)
    unfinished = {s: n for s, n in sorted(status.items()) if s not in RESULT}
    done = {(p["task"], p["label"]) for p, s in zip(planned, statuses) if s == "finished"}
    without = sorted({(p["task"], p["label"]) for p in planned} - done)
    return {"planned": len(planned), "finished": len(planned) - sum(unfinished.values()),
            "unfinished": sum(unfinished.values()), "unfinished_by_status": unfinished,
            "inits_without_results": [{"task": t, "init": label} for t, label in without]}


def empty_groups(planned: list[dict[str, Any]] | None, have: set[tuple],
                 recorded: Iterable[str] = ()) -> list[tuple]:
    """(task, label, axes json) of the planned groups not in `have` (none of their trials has a run), so
    that the table still lists every planned init. A group planned without an axis (`planning.moot_axes`)
    is had where runs of it at a value of that axis are (an older plan's); so is one a trial key of which
    is in `recorded` (the keys with a run): another sweep of the experiment trained it under its own row
    (Table 3's trainable + PE cell is the main sweep's trials), so it is not empty."""
    recorded = set(recorded)
    groups = {(p["task"], p["label"], json.dumps(p["axes"], sort_keys=True)) for p in planned or []}
    trained = {(p["task"], p["label"], json.dumps(p["axes"], sort_keys=True)) for p in planned or []
               if p["key"] in recorded}
    return sorted(g for g in groups - have - trained if not any(
        h[:2] == g[:2] and within(json.loads(g[2]), json.loads(h[2])) for h in have))


def sentence(c: dict[str, Any] | None) -> str | None:
    """One sentence for a table that carries no notes (the LaTeX one) when planned trials have no result:
    a table read while trials run, or after some failed, must not pass for the finished one."""
    if not c or c["unfinished"] == 0:
        return None
    how = ", ".join(f"{n} {s}" for s, n in c["unfinished_by_status"].items())
    return f"Incomplete: {c['unfinished']} of {c['planned']} planned trials have no result ({how})."


def markdown(c: dict[str, Any] | None) -> list[str]:
    """The lines that say the experiment is incomplete (none when every planned trial finished)."""
    if not c or (c["unfinished"] == 0 and not c["inits_without_results"]):
        return []
    how = ", ".join(f"{n} {s}" for s, n in c["unfinished_by_status"].items())
    lines = ["", f"**Incomplete: {c['unfinished']} of {c['planned']} planned trials never finished** ({how})."]
    if c["inits_without_results"]:
        by_task: dict[str, list[str]] = {}
        for x in c["inits_without_results"]:
            by_task.setdefault(x["task"], []).append(x["init"])
        lines.append("Inits with no finished trial: "
                     + "; ".join(f"{t}: {', '.join(labels)}" for t, labels in by_task.items()) + ".")
    return lines


def planned_in_mlflow(exp_id: str, uri: str | None) -> list[dict[str, Any]] | None:
    """The plan of the experiment's newest sweep, from its `spec.yaml` artifact
    (`run_readers.sweep_spec`); None when there is no sweep run, its spec is missing or no longer loads,
    it is an Optuna search (drawn at run time), or its spec no longer plans here (e.g. a path of another
    machine)."""
    from embinit.tracking import run_readers
    runs = run_readers.sweep_records(exp_id, uri)
    if not runs:
        return None
    newest = max(runs, key=lambda r: r.start_ms)
    try:
        spec = run_readers.sweep_spec(newest, uri).spec
        if spec is None or spec.drawn:
            return None
        return planned_trials(spec.plan())
    except Exception:  # a missing artifact or a spec that no longer plans here: say nothing
        return None
