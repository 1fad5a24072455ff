"""What the driver ships to the Ray workers: small frozen, picklable records.

- `WorkItem`: one planned trial: its config, label, group (axes, search point) and selection metric;
- `Unit`: what one Tune trial runs: one item (grid), a fused group of items, up to
  `execution.trials_per_unit` grid items in turn, or an Optuna point's seeds in turn;
- `SweepContext`: the settings every worker of a sweep shares (MLflow target, what to log, caches,
  the searched keys, the analyses, how the sweep's caller gives a task its data).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from embinit.task_registry import selection_metric
from embinit.tracking.run_names import trial_run_name

if TYPE_CHECKING:
    from embinit.tasks.hub import DataAdvice


@dataclass(frozen=True)
class WorkItem:
    config: dict[str, Any]            # TrialConfig.to_dict()
    label: str
    axes: dict[str, Any]
    point: dict[str, Any]
    selection: tuple[str, str]        # (metric, mode), e.g. ("val/bleu", "max")
    key: str
    name_task: str | None = None      # the task, where the spec has several: its run's name says it

    @property
    def metric(self) -> str:
        return self.selection[0]

    @property
    def run_name(self) -> str:
        """The name of its MLflow run (`Xavier-s1 emb_seed=3`; `run_names.trial_run_name`), which its
        plots' titles and the running-trials table say too. (A reopened run keeps the name it was given.)"""
        return trial_run_name(self.label, self.config["seed"], self.axes, self.point, self.name_task)

    def group(self) -> dict[str, Any]:
        """The run's `embinit.group` tag: axes, search point and selection metric."""
        return {"axes": self.axes, "point": self.point, "selection": list(self.selection)}

    def at_point(self, overrides: dict[str, Any]) -> WorkItem:
        """This item at an Optuna search point: the searched values override its config."""
        if not overrides:
            return self
        return replace(self, config={**self.config, **overrides}, point=overrides)


@dataclass(frozen=True)
class Unit:
    trials: tuple[WorkItem, ...]
    fused: bool = False               # True: the trials train as one fused model (embinit.sweep.fused)


@dataclass(frozen=True)
class SweepContext:
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    log_checkpoint: bool = True
    log_plots: bool = True
    log_outputs: bool = True                          # per-example outputs (embinit.checkpoint_files)
    cache_dir: str | None = None
    search_keys: tuple[str, ...] = ()                 # Optuna: the searched hyperparameters
    analyses: dict[str, Any] | None = field(default=None)   # embinit.sweep.analyses.shared_settings
    storage: str | None = None        # the operator's object store (embinit.storage), else node-local folders
    trainer: str = "torch"                            # spec.execution.trainer (noop: embinit.sweep.noop)
    # The database behind `tracking_uri` when that is an `mlflow server`: the workers read and write the
    # trial runs' records there directly, the artifacts still go through the server. None: all through
    # `tracking_uri`.
    store_uri: str | None = None
    # The sweep's Ray cannot span machines (embinit.sweep.ray_runtime.one_machine, set once connected):
    # a restarted trial finds its node-local checkpoint folder, so Tune need not copy it (resume.py).
    one_machine: bool = False
    # How the sweep's caller gives a task its data, for a trial's no-data error (and so its MLflow record):
    # the service's driver gives the service's (a spec's data_dir, its data roots); None: the command
    # line's (--data-dir). The worker sets it around its trials (embinit.tasks.hub.advising); not part of
    # any trial's config or key.
    advice: DataAdvice | None = None

    @property
    def runs_uri(self) -> str:
        """Where the workers read and write trial run records."""
        return self.store_uri or self.tracking_uri


def work_item(spec, p) -> WorkItem:
    """What a worker needs to train one planned trial `p`: its config, label, group and selection metric;
    the task for its run's name where the spec has several (the same label, seed and setting on each task
    would give their runs one name; a single task's runs keep the names they had)."""
    metric, mode = selection_metric(p.task)
    if spec.search is not None and spec.search.metric:
        metric, mode = spec.search.metric, spec.search.mode or mode
    several = len({t.task for t in spec.tasks}) > 1
    return WorkItem(p.config, p.label, p.axes, p.point, (metric, mode), p.key, p.task if several else None)


def units_to_run(spec, finished: set[str], planned=None) -> tuple[list[Unit], int]:
    """Units of work for Tune (grid: one trial each) and how many planned trials were reused;
    `planned`: the spec's plan when the caller has it (else expanded here)."""
    units, reused = [], 0
    for p in spec.plan() if planned is None else planned:
        if p.key in finished:
            reused += 1
            continue
        units.append(Unit((work_item(spec, p),)))
    return units, reused


def pack_units(units: list[Unit], per_unit: int) -> list[Unit]:
    """Single-trial units -> units of up to `per_unit` trials that one Tune trial runs in turn (plan
    order): Ray Tune's own cost per Tune trial (scheduling, the actor's reset, the result round trips) is
    then paid once per unit, not once per trial. A restarted unit reuses the trials it finished."""
    if per_unit <= 1:
        return units
    items = [item for u in units for item in u.trials]
    return [Unit(tuple(items[i:i + per_unit])) for i in range(0, len(items), per_unit)]
