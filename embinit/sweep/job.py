"""`TuneJob`: what a sweep's Tune runs need besides their units, as one frozen value (the driver's side;
what the workers get is `embinit.sweep.work`). `run_sweep` builds it once; the grid's Tune run
(`tune_run.run_tune`) and the Optuna search (`optuna_search.run_optuna`) read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from embinit.sweep.work import SweepContext

if TYPE_CHECKING:
    from embinit.spec import ExperimentSpec, PlannedTrial


def never() -> bool:
    return False


@dataclass(frozen=True)
class TuneJob:
    spec: ExperimentSpec
    plan: tuple[PlannedTrial, ...]    # spec.plan(): the sweep expands its spec once
    shared: SweepContext              # the settings every worker shares
    storage: Path | str               # where Tune keeps its state and trial checkpoints
    progress: bool | Callable[[dict[str, Any]], None] = True  # True: a status line; a callable: the counts
    should_stop: Callable[[], bool] = never   # once true, running trials stop and no new ones start
    extra_callbacks: Callable | None = None   # `f(TrialConfig) -> [trainer callbacks]`, called in the worker
    address: str | None = None        # the Ray cluster; None: a local Ray, started and stopped here
    reused: int = 0                   # planned trials MLflow had finished before this sweep
    errors: list[str] = field(default_factory=list, compare=False, hash=False)  # Tune trials that errored for good, why
    # (trial, why) of each trial of a Tune trial that errored for good (embinit.sweep.gave_up.GaveUp)
    gave_up: list = field(default_factory=list, compare=False, hash=False)

    @property
    def total(self) -> int:
        """Planned trials (an Optuna search: one per scientific point and seed)."""
        return len(self.plan)
