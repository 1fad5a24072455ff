"""What every section of the reproduction reads: the runs of the configured experiments, loaded once
from MLflow, and how to select and scale their values. The sections (tables, table4, findings, blog,
beyond, runs) are functions of this; the order they appear in is `embinit.reproduction.document`'s.

`exports` is where each section puts its rows for reproduction.json; a section writes only its own key
and reads no other section's (what two sections share, such as Table 4's rows, is computed from the
data by a function both call), so the sections may run in any order."""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any

from embinit.tracking import mlflow_store, records, run_readers
from embinit.config import metric_range
from embinit.errors import EmbinitError
from embinit.report.rows import best_point
from embinit.task_registry import loss_metric, primary_metric, reported_metrics
from embinit.reproduction.inputs import Group, Inputs, Trial, load_trials, role_of
from embinit.reproduction.table4_runs import Table4Runs, expected, select
from embinit.tracking.run_records import AnalogyRun, StoredSpec, SweepRecord


class ReproductionData:
    def __init__(self, uri: str | None, inputs: Inputs | None = None):
        self.uri, self.inputs = uri, inputs or Inputs()
        self.data: dict[str, tuple[list[Trial], list]] = {}
        self.missing: list[str] = []     # experiments not in the store yet (a partial run): shown as such
        errors = []
        for g in self.inputs.groups:
            try:
                self.data[g.experiment] = load_trials(g.experiment, uri)
            except EmbinitError as e:
                self.data[g.experiment], errors = ([], []), errors + [str(e)]
                self.missing.append(g.experiment)
        self.analogy_runs = run_readers.analysis_records(self.inputs.analogy_experiment, uri, "analogy")
        studies = (self.inputs.dose_experiment, self.inputs.oov_experiment)   # beyond the paper
        if len(self.missing) == len(self.inputs.groups) and not self.analogy_runs and \
                not any(mlflow_store.experiment_id(e, uri) is not None for e in studies):
            raise EmbinitError(errors[0] if len(errors) == 1 else "; ".join(errors))
        self.exports: dict[str, list[dict[str, Any]]] = {}
        self._specs: dict[str, StoredSpec | None] = {}   # sweep run id -> its spec.yaml (`sweep_spec`)

    def sweep_spec(self, run: SweepRecord) -> StoredSpec | None:
        """The spec a sweep run recorded (`run_readers.sweep_spec`), read once per document: the runs
        section shows it and the similarity sections read their K from it (each read is an artifact
        download, which a remote store pays for). None, also remembered, when the run has no readable
        spec.yaml (a sweep recorded before embinit kept one)."""
        if run.run_id not in self._specs:
            try:
                self._specs[run.run_id] = run_readers.sweep_spec(run, self.uri)
            except EmbinitError:   # no spec.yaml artifact, or unreadable: "missing"
                self._specs[run.run_id] = None
        return self._specs[run.run_id]

    @cached_property
    def _analogy(self) -> tuple[Table4Runs, list[str]]:
        read, notes = run_readers.analogy_runs(self.analogy_runs)
        started = {r.run_id: r.start_ms for r in self.analogy_runs}
        return select(read, started, expected(self.inputs.analogy_command)), notes

    @property
    def analogy_results(self) -> list[AnalogyRun]:
        """The analogy runs Table 4 reads, by the seed of their random positions (read once): one
        configuration, the newest finished run of each seed (`embinit.reproduction.table4_runs`; what
        it left out is in `analogy_selection`); a run without a readable result.json is left out, with
        a note in `analogy_notes`."""
        return self._analogy[0].runs

    @property
    def analogy_selection(self) -> Table4Runs:
        """The selection `analogy_results` comes from, with its notes on repeated seeds and on runs of
        other configurations."""
        return self._analogy[0]

    @property
    def analogy_notes(self) -> list[str]:
        """One message per analogy run left out of `analogy_results`, naming it and what is wrong with
        its result.json (missing or unreadable)."""
        return self._analogy[1]

    # ---- selection helpers
    def seed_slots(self, g: Group, role: str, cell: tuple[bool, bool] = (True, True)) -> list[Trial]:
        """The run that stands for each seed of a role in one Table-3 cell of the group's experiment (by
        default the main sweep's: trainable + PE), whatever its status: `records.stand_ins` with the seed
        as the slot, the rule `embinit report` counts by (a seed retried after a failure, or a spec run
        again under a new key, e.g. with more epochs, counts once: by its finished or diverged run, else
        the newest). With a search (the paper's MNLI grid), only the role's chosen point is read, the one
        `embinit report` reports (`report.rows.best_point`)."""
        trials = [t for t in self.data[g.experiment][0] if t.task == g.task and t.cell == cell
                  and role_of(t.label, g.source) == role]
        point = best_point(trials) if trials else {}
        trials = [t for t in trials if t.point == point]
        return list(records.stand_ins(trials, lambda t: t.config.get("seed")).values())

    def main_trials(self, g: Group, role: str, cell: tuple[bool, bool] = (True, True)) -> list[Trial]:
        """The seeds of a role whose run finished (`seed_slots`), one run each: Table 1, the statistics and
        the findings all read these trials (and Table 3 those of its other cells)."""
        return [t for t in self.seed_slots(g, role, cell) if t.status == "finished"]

    def values(self, trials: list[Trial], metric: str) -> list[float]:
        return [t.metrics[metric] for t in trials if metric in t.metrics and math.isfinite(t.metrics[metric])]

    def per_seed(self, trials: list[Trial], metric: str, scale: float = 1.0) -> dict[str, dict[str, Any]]:
        """{seed: {"value", "run_id"}} of the trials with a finite `metric` (times `scale`: the paper's units):
        the values an exported summary or comparison was computed from, so reproduction.json lets a
        reader recompute every interval (review M6)."""
        return {str(t.config.get("seed")): {"value": t.metrics[metric] * scale, "run_id": t.run_id}
                for t in trials if metric in t.metrics and math.isfinite(t.metrics[metric])}

    @staticmethod
    def metric(task: str, m: str | None = None) -> tuple[str, str, float]:
        """(metric, its name, scale to the paper's units) of the task's Table-1 metric, or of `m`."""
        m = m or primary_metric(task)
        split = next((f"{s} " for s in ("matched", "mismatched") if m.endswith(f"_{s}")), "")
        if "loss" in m:
            return m, f"best val. {split}loss", 1.0
        return (m, "test BLEU", 1.0) if "bleu" in m else (m, f"best val. {split}accuracy (%)", 100.0)

    @staticmethod
    def loss(task: str) -> str:
        """The task's best validation loss: on the split it selects its best epoch on (MNLI's is per split:
        best/val/loss_matched; it logs no best/val/loss)."""
        return "best/" + loss_metric(task)

    @staticmethod
    def other_metrics(task: str) -> list[str]:
        """The metrics the task reports beside its Table-1 metric (MNLI: the mismatched accuracy)."""
        return [m for m in reported_metrics(task) if m != primary_metric(task)]

    def bounds(self, task: str) -> tuple[float, float]:
        """The range of the task's metric in the paper's units (confidence intervals are clipped to it)."""
        m, _, scale = self.metric(task)
        return tuple(b * scale for b in metric_range(m))

    def scaled(self, g: Group, role: str) -> list[float]:
        m, _, scale = self.metric(g.task)
        return [v * scale for v in self.values(self.main_trials(g, role), m)]
