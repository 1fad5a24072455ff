"""Which trials of a search stand for their report row, as tags a researcher filters MLflow's run table by.

A search trains every point, and each point's trials finish like any other: in MLflow's run table a trial
of a point the report did not choose looked like a final result. The sweep that reports them sets, on
each trial of a (task, init, axes) group with several points, `records.SEARCH_POINT_TAG` (`selected` |
`not selected`: `tags.embinit.search_point = 'selected'` in the search box shows the reported trials alone)
and `records.SEARCH_NOTE_TAG`, which says which sweep chose which point and by what. The point is the
report's own (`rows.best_point` of `rows.group`), so tags and report cannot disagree for that sweep; a
later sweep of the same keys sets them again. Trials of groups with one point get none.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from embinit.report.rows import best_point, group
from embinit.tracking.records import SEARCH_NOTE_TAG, SEARCH_POINT_TAG, TrialRecord
from embinit.tracking.run_names import trial_setting

SELECTED, NOT_SELECTED = "selected", "not selected"


def point_tags(trials: Iterable[TrialRecord], sweep_name: str) -> dict[str, dict[str, str]]:
    """run id -> {SEARCH_POINT_TAG, SEARCH_NOTE_TAG} for every trial of a group with more than one search
    point, as the report of `trials` by the sweep run named `sweep_name` chooses them."""
    out: dict[str, dict[str, str]] = {}
    for (task, label, _axes, _setting), members in group(list(trials)).items():
        if len({json.dumps(t.point, sort_keys=True) for t in members}) < 2:
            continue
        chosen = best_point(members)
        note = _note(sweep_name, task, label, chosen, members)
        for t in members:
            out[t.run_id] = {SEARCH_POINT_TAG: SELECTED if t.point == chosen else NOT_SELECTED,
                             SEARCH_NOTE_TAG: note}
    return out


def _note(sweep_name: str, task: str, label: str, chosen: dict[str, Any], members: list[TrialRecord]) -> str:
    """e.g. `mnli-grid #2 reports GloVe (mnli) at lr=0.0001, of 3 points: the best mean best/val/acc (max)
    over its seeds, among the points that lost the fewest seeds`."""
    metric, mode = (members[0].selection or ["val/loss", "min"])[:2]
    n_points = len({json.dumps(t.point, sort_keys=True) for t in members})
    return (f"{sweep_name} reports {label} ({task}) at {trial_setting(None, chosen)}, of {n_points} points: "
            f"the best mean best/{metric} ({mode}) over its seeds, among the points that lost the fewest seeds")
