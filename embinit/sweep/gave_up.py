"""Trials Tune gave up on before they had an MLflow run, recorded as failed runs that say why.

A trial can fail in its worker before its run exists: its key's claim (a checkpoint folder or object store
it cannot use), a packed unit's later trials after an earlier one failed, a worker lost before it opened the
run. Once Tune gives up on its unit (`retries` spent), nothing in MLflow named the trial: the run table had
no row, and the report, `embinit report` and the service's `/trials` read it as "never started", as if the
sweep had been cancelled; the reason was in Tune's error.txt alone. `GaveUp` keeps, per Tune trial that
errored for good, its unit's trials and the error's last line; `record` then opens a run for each such trial
that still has none, closed FAILED with `embinit.error` = `GAVE_UP` + that line (its planned params, its
name and tags as any trial run's), so it reads as failed, with its reason, everywhere. A key that has a run
(of this sweep or an earlier one) keeps it: that run says what happened, and a run with a checkpoint is
left for the rerun to resume.
"""

from __future__ import annotations

from typing import Sequence

from ray.tune import Callback

from embinit.sweep.progress import error_line
from embinit.sweep.work import Unit, WorkItem
from embinit.tracking import run_readers, trial_run

# the error's first line; its last is Tune's (a report's failure reason is a failed trial's error's last line)
GAVE_UP = "Tune gave up on this trial before it had an MLflow run (its retries spent); Tune's error:\n"


class GaveUp(Callback):
    """The trials of each Tune trial that errored for good, with why (`error_line`): `items`."""

    def __init__(self, units: Sequence[Unit]):
        self.units = units
        self.items: list[tuple[WorkItem, str]] = []

    def on_trial_error(self, iteration, trials, trial, **info):
        i = (getattr(trial, "config", None) or {}).get("unit")
        if isinstance(i, int) and 0 <= i < len(self.units):
            why = error_line(trial)
            self.items += [(item, why) for item in self.units[i].trials]


def record(exp_id: str, uri: str, parent_id: str, items: Sequence[tuple[WorkItem, str]]) -> int:
    """Record each of `items` whose key has no run in the experiment as a FAILED run of sweep `parent_id`
    saying why Tune gave up on it (`uri`: where trial runs are written). Returns how many were recorded."""
    n = 0
    for item, why in {item.key: (item, why) for item, why in items}.values():
        if run_readers.key_records(exp_id, uri, item.key):
            continue
        run = trial_run.TrialRun.open(uri, exp_id, parent_id, item.config, item.key, item.label, item.group(),
                                      key_runs=[], name_task=item.name_task)
        run.fail(GAVE_UP + why, checkpoint=False)
        n += 1
    return n
