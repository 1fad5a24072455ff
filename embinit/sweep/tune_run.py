"""One Ray Tune run over a list of units (grid: one embinit trial per Tune trial)."""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from ray import tune

from embinit.sweep import tune_state
from embinit.sweep.gave_up import GaveUp
from embinit.sweep.interrupt import stop_on_interrupt
from embinit.sweep.job import TuneJob
from embinit.sweep.progress import Progress
from embinit.sweep.ray_runtime import one_machine
from embinit.sweep.trainable import train_unit
from embinit.sweep.unit_table import UnitTable
from embinit.sweep.work import Unit


class StopAll(tune.Stopper):
    """Stops every trial once the caller's stop flag is set (polled by Tune every ~0.1 s)."""

    def __init__(self, should_stop: Callable[[], bool]):
        self.should_stop, self.fired = should_stop, False

    def __call__(self, trial_id, result) -> bool:
        return False

    def stop_all(self) -> bool:
        self.fired = self.fired or bool(self.should_stop is not None and self.should_stop())
        return self.fired

    def __getstate__(self) -> dict:
        # Tune pickles its run config into its experiment state; a threading.Event (a lock) cannot be
        # pickled, and only this live object ever stops anything (embinit never restores Tune state).
        return {**self.__dict__, "should_stop": None}


# Tune's name and folder name of each unit's trial, per sweep of this process (Tune asks for names in the
# driver only).
_UNIT_NAMES: dict[str, tuple[tuple[str, str], ...]] = {}


def unit_name(unit: Unit) -> str:
    """The folder of a unit's Tune trial, `Xavier-s0-5851390d`; a unit of several trials is named after its
    first and says how many (`fused3-Xavier-s0-5851390d`, `3x-...` for trials run in turn)."""
    item = unit.trials[0]
    return _how_many(unit, "-") + f"{item.label}-s{item.config['seed']}-{item.key[:8]}"


def unit_title(unit: Unit) -> str:
    """What the progress table (and the service's status) calls a unit's Tune trial: its first trial's MLflow
    run name (label, seed, the axes' and search point's values, the task where the spec has several;
    `run_names.trial_run_name`) and key, `Xavier-s0 emb_seed=3 [5851390d]`, where `unit_name` told two
    trials of one label and seed apart by their keys alone; `fused3 ...`, `3x ...` for a unit of several.
    Not a folder name (it may hold spaces and a value's `/`), so Tune's folders keep `unit_name`."""
    item = unit.trials[0]
    return _how_many(unit, " ") + f"{item.run_name} [{item.key[:8]}]"


def _how_many(unit: Unit, sep: str) -> str:
    n = len(unit.trials)
    return f"{'fused' if unit.fused else ''}{n}{'' if unit.fused else 'x'}{sep}" if n > 1 else ""


def trial_name(sweep: str, trial, folder: bool = False) -> str:
    """Tune's `trial_name_creator` (`folder`: its `trial_dirname_creator`), bound to the sweep with
    `functools.partial`. Tune stores the creator in every trial's state and writes the state of all trials
    at each of its checkpoints: a closure over the units was pickled into each trial (2 MB of units x 400
    trials: a 1.6 GB state file, a minute before the first trial of a 10,000-trial sweep and GBs in the
    driver). A module function and the sweep's name pickle in a few bytes."""
    names, i = _UNIT_NAMES.get(sweep, ()), trial.config["unit"]
    return names[i][folder] if i < len(names) else f"unit-{i}"


@contextmanager
def unit_names(sweep: str, units: list[Unit]) -> Iterator[tuple[Callable, Callable]]:
    """The sweep's trial name and folder name creators, while its units' names are registered."""
    _UNIT_NAMES[sweep] = tuple((unit_title(u), unit_name(u)) for u in units)
    try:
        yield functools.partial(trial_name, sweep), functools.partial(trial_name, sweep, folder=True)
    finally:
        _UNIT_NAMES.pop(sweep, None)


def quiet_tune_logs() -> None:
    """MLflow is the record: Tune's notes about its own result files (which embinit turns off) and
    where it wrote its state are noise on embinit's terminal. Trial errors still print."""
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    logging.getLogger("ray.tune.tune").setLevel(logging.WARNING)


def unique_name(spec) -> str:
    """A name no other sweep uses, for this sweep's trainable and its Tune run.

    Tune registers a trainable under its name in the cluster's key-value store, per Ray job; every
    experiment driver the service starts is in the API's job, so two sweeps registering `train_unit`
    would overwrite each other and train each other's units (ray-project/ray#31330)."""
    return f"embinit_{spec.name}_{uuid.uuid4().hex[:12]}"


def make_trainable(spec, units, shared, extra_callbacks, name: str | None = None):
    # whether a restarted trial finds its folder on this machine (then Tune keeps no copy, resume.py)
    shared = dataclasses.replace(shared, one_machine=one_machine())
    # the units once per worker process, not unpickled whole for every Tune trial (embinit.sweep.unit_table)
    fn = tune.with_parameters(train_unit, shared=shared, units=UnitTable(units), extra_callbacks=extra_callbacks)
    fn.__name__ = name or unique_name(spec)
    return tune.with_resources(fn, {"cpu": spec.resources.cpus, "gpu": spec.resources.gpus})


def run_config(spec, name: str, storage: Path | str, callbacks: list, stopper: StopAll) -> tune.RunConfig:
    return tune.RunConfig(name=name, storage_path=str(storage), stop=stopper, callbacks=callbacks,
                          failure_config=tune.FailureConfig(max_failures=spec.retries),
                          checkpoint_config=tune.CheckpointConfig(num_to_keep=1), verbose=0)


def progress_callback(progress, total: int, reused: int, per_unit: int = 1, metric: str | None = None,
                      unit_sizes: list[int] | None = None) -> list:
    if progress is False:
        return []
    return [Progress(total, reused, per_unit, sink=progress if callable(progress) else None, metric=metric,
                     unit_sizes=unit_sizes)]


def selection_label(units: list[Unit]) -> str | None:
    """The selection metric every unit's trials share (the progress table's "best ..." column), if one."""
    metrics = {item.selection[0] for u in units for item in u.trials}
    return metrics.pop() if len(metrics) == 1 else "(selection metric)"


def run_tune(job: TuneJob, units: list[Unit]) -> bool:
    """Run the units; returns True when the sweep was cancelled through `job.should_stop`."""
    quiet_tune_logs()
    unique = unique_name(job.spec)
    callbacks = progress_callback(job.progress, job.total, job.reused, per_unit=job.spec.execution.trials_per_unit,
                                  metric=selection_label(units), unit_sizes=[len(u.trials) for u in units])
    gave_up = GaveUp(units)   # the trials Tune gives up on, which may have no run (embinit.sweep.gave_up)
    callbacks = [*callbacks, gave_up]
    # Ctrl-C stops the trials, then raises KeyboardInterrupt
    with stop_on_interrupt() as interrupted, unit_names(unique, units) as (names, folders):
        stopper = StopAll(lambda: interrupted() or bool(job.should_stop()))
        tuner = tune.Tuner(
            make_trainable(job.spec, units, job.shared, job.extra_callbacks, unique),
            param_space={"unit": tune.grid_search(list(range(len(units))))},
            tune_config=tune.TuneConfig(max_concurrent_trials=job.spec.max_concurrent, reuse_actors=True,
                                        trial_name_creator=names, trial_dirname_creator=folders),
            run_config=run_config(job.spec, unique, job.storage, callbacks, stopper))
        try:
            tune_state.fit(tuner, unique)   # nothing reads Tune's state again (embinit.sweep.tune_state)
        finally:
            job.errors.extend(e for c in callbacks if isinstance(c, Progress) for e in c.errors)
            job.gave_up.extend(gave_up.items)
    return stopper.fired
