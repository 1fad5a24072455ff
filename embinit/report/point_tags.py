"""Which trials of a search stand for their report row, and which row a trial is in, as tags a researcher
filters and groups MLflow's run table by (`point_tags`, `cell_tags`).

A search trains every point, and each point's trials finish like any other: in MLflow's run table a trial
of a point the report did not choose looked like a final result. At its end a sweep sets, on each trial of
its experiment (one run per key, as `embinit report` reads them) in a report row's group with several
points, `records.SEARCH_POINT_TAG` (`selected` | `not selected`: `tags.embinit.search_point = 'selected'`
in the search box shows the reported trials alone) and `records.SEARCH_NOTE_TAG`, which says which point
was chosen and by what. The point is the report's own (`rows.best_point` of `rows.group`), so tags and
`embinit report` agree as of the latest sweep; each sweep into the experiment sets them again, writing
only the runs whose tags change. Trials of groups with one point get none. `cell_tags` keeps the
`embinit.cell` tag, MLflow's "Group by", one report row's trials.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from embinit.report.plots import setting_text
from embinit.report.rows import best_point, by_setting, group
from embinit.tracking.records import CELL_TAG, SEARCH_NOTE_TAG, SEARCH_POINT_TAG, TrialRecord
from embinit.tracking.run_names import trial_cell, trial_setting

SELECTED, NOT_SELECTED = "selected", "not selected"


def point_tags(trials: Iterable[TrialRecord]) -> dict[str, dict[str, str]]:
    """run id -> {SEARCH_POINT_TAG, SEARCH_NOTE_TAG} for each trial of a group with more than one search
    point, as the report of `trials` chooses them, where the run holds other values (`TrialRecord.shown`)."""
    out: dict[str, dict[str, str]] = {}
    for (task, label, axes, setting), members in group(list(trials)).items():
        if len({json.dumps(t.point, sort_keys=True) for t in members}) < 2:
            continue
        chosen = best_point(members)
        row = label + (f" {trial_setting(json.loads(axes), None)}" if axes != "{}" else "")
        note = _note(task, row + (setting_text(setting) if setting != "{}" else ""), chosen, members)
        for t in members:
            tags = {SEARCH_POINT_TAG: SELECTED if t.point == chosen else NOT_SELECTED, SEARCH_NOTE_TAG: note}
            if any(t.shown.get(k) != v for k, v in tags.items()):
                out[t.run_id] = tags
    return out


def _note(task: str, row: str, chosen: dict[str, Any], members: list[TrialRecord]) -> str:
    """e.g. `GloVe {epochs=4} (mnli) is reported at lr=0.0001, of 3 points: the best mean best/val/acc (max)
    over its seeds, among the points that lost the fewest seeds` (`row`: the init, axes and settings)."""
    metric, mode = (members[0].selection or ["val/loss", "min"])[:2]
    n_points = len({json.dumps(t.point, sort_keys=True) for t in members})
    return (f"{row} ({task}) is reported at {trial_setting(None, chosen)}, of {n_points} points: the best "
            f"mean best/{metric} ({mode}) over its seeds, among the points that lost the fewest seeds")


def cell_tags(trials: Iterable[TrialRecord]) -> dict[str, str]:
    """run id -> its `embinit.cell` where the run holds another: the cell the report's row of the trial names.
    An init whose trials in the experiment differ in a setting (a spec run again with `epochs: 4` for 3)
    has one report row per setting (`Xavier {epochs=4}`), but every run was given the cell of its label,
    axes and point alone, so MLflow's "Group by" on it averaged the 3- and 4-epoch seeds into one mean the
    report never shows. `trials`: every trial record of the experiment (each run of a seed too)."""
    out = {}
    for (task, _label, _axes, setting), members in by_setting(list(trials)).items():
        if setting == "{}":   # the label's only setting: its cells stay as their runs were given them
            continue
        for t in members:
            cell = _base(t, task) + setting_text(setting) + f" ({task})"
            if t.shown.get(CELL_TAG) != cell:
                out[t.run_id] = cell
    return out


def _base(t: TrialRecord, task: str) -> str:
    """The run's cell without its task and any settings given it before (` {epochs=3}`): as it was created
    (axes in the spec's order), or, for a run from before the tag, made from its record."""
    end = f" ({task})"
    held = t.shown.get(CELL_TAG)
    if not held or not held.endswith(end):
        return trial_cell(task, t.label, t.axes, t.point).removesuffix(end)
    return re.sub(r"( \{[^{}=]+=[^{}]*\})+$", "", held.removesuffix(end))
