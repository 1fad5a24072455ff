"""Sweep runs, analysis runs and metric histories read back from MLflow as frozen values, as
`embinit.records` reads trial runs. `embinit.run_readers` searches the store and builds them; the report
and the reproduction read these, never MLflow's `Run` objects. This module imports neither MLflow nor
torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from embinit.records import KIND_TAG, N_TRIALS_TAG, SPEC_HASH_TAG


@dataclass(frozen=True)
class SweepRecord:
    """One sweep's (parent) run. `status` is MLflow's (RUNNING | FINISHED | FAILED | KILLED); `tags`
    holds all the run's tags (its provenance: `embinit.provenance.read`)."""

    run_id: str
    experiment_id: str
    name: str
    status: str
    spec_hash: str | None
    n_trials: str | None       # the planned count, as tagged
    start_ms: int = 0
    end_ms: int | None = None
    artifact_uri: str = ""
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AnalysisRecord:
    """One analysis run outside a sweep (`embinit.run_writers.log_analysis_run`, e.g. kind `analogy`)."""

    run_id: str
    kind: str
    name: str
    status: str
    start_ms: int = 0
    end_ms: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    artifact_uri: str = ""
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricHistory:
    """One metric of one run: one value per step, sorted by step. A step logged more than once (a
    resumed trial re-logs the epochs after its checkpoint) keeps the value logged last."""

    run_id: str
    metric: str
    points: tuple[tuple[int, float], ...] = ()

    @property
    def by_step(self) -> dict[int, float]:
        return dict(self.points)

    @property
    def steps(self) -> set[int]:
        return {step for step, _ in self.points}


def sweep_from_run(run) -> SweepRecord | None:
    """The record of a sweep's run, or None for any other run."""
    tags = run.data.tags
    if tags.get(KIND_TAG) != "sweep":
        return None
    info = run.info
    return SweepRecord(info.run_id, info.experiment_id, info.run_name or "", info.status, tags.get(SPEC_HASH_TAG),
                       tags.get(N_TRIALS_TAG), info.start_time or 0, info.end_time, info.artifact_uri or "",
                       dict(tags))


def sweeps_from_runs(runs: Iterable) -> list[SweepRecord]:
    """The records of the sweep runs among `runs`, in their order."""
    return [r for r in map(sweep_from_run, runs) if r is not None]


def analysis_from_run(run) -> AnalysisRecord:
    info = run.info
    return AnalysisRecord(info.run_id, run.data.tags.get(KIND_TAG, "?"), info.run_name or "", info.status,
                          info.start_time or 0, info.end_time, dict(run.data.metrics), dict(run.data.params),
                          info.artifact_uri or "", dict(run.data.tags))


def history_from_metrics(run_id: str, metric: str, logged: Iterable[Any]) -> MetricHistory:
    """A metric's history from MLflow's `Metric`s: per step the value with the latest timestamp (the
    store's order among equal timestamps)."""
    last: dict[int, float] = {}
    for m in sorted(logged, key=lambda m: m.timestamp):
        last[m.step] = m.value
    return MetricHistory(run_id, metric, tuple(sorted(last.items())))
