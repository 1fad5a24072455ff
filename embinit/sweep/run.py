"""`run_sweep`: a validated spec -> trials MLflow does not have yet -> Ray Tune -> MLflow -> report.

What still has to run is decided by the trial keys and MLflow alone (never by Tune's experiment state,
see docs/architecture.md): every planned key with a FINISHED run is reused, so submitting the same
spec again resumes it and trains nothing twice.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from embinit.tracking import (driver_liveness, mlflow_store, provenance, records, run_readers, run_writers,
    store_check, server_check as tracking_server)
from embinit.errors import EmbinitError
from embinit.model_dims import check_dimensions
from embinit.spec import ExperimentSpec, check_local_paths, load_spec
from embinit.storage import Store
from embinit.storage import configured as configured_store
from embinit.sweep import abandon, guardian
from embinit.sweep.analyses import shared_settings
from embinit.sweep.fused import CPU_NOTE, fused_units, parallel_slots
from embinit.sweep.interrupt import how_interrupted, interrupted_reason
from embinit.sweep.job import TuneJob
from embinit.sweep.not_reused import notice_lines
from embinit.sweep.ray_runtime import RayRuntime, check_fits_machine
from embinit.sweep.work import SweepContext, Unit, pack_units, units_to_run
from embinit.trusted import check_writable
from embinit.tracking.prepare import check_store_behind, check_store_shape, prepare_store

if TYPE_CHECKING:
    from embinit.tasks.hub import DataAdvice

StopFlag = threading.Event | Callable[[], bool] | None


@dataclass
class SweepResult:
    experiment: str
    experiment_id: str
    parent_run_id: str
    tracking_uri: str
    planned: int                       # trials the spec expands to
    reused: int                        # of those, already finished in MLflow before this sweep
    trials: list[dict[str, Any]] = field(default_factory=list)   # run_readers.trial_row rows, one per planned key
    cancelled: bool = False
    wall_s: float = 0.0
    report: Any = None                 # embinit.report.table.Report
    linked: bool = False               # nothing to train: parent_run_id is the spec's earlier sweep run
    shared: int = 0                    # finished by another sweep while this one ran (a shared key)
    tune_errors: list[str] = field(default_factory=list)   # Tune trials that errored for good: "name: why"

    def count(self, status: str) -> int:
        return sum(1 for t in self.trials if t["status"] == status)

    @property
    def n_finished(self) -> int:
        return sum(self.count(s) for s in records.RESULT)

    @property
    def n_failed(self) -> int:
        return self.count("failed")


def _stop_fn(stop: StopFlag) -> Callable[[], bool]:
    if stop is None:
        return lambda: False
    if isinstance(stop, threading.Event):
        return stop.is_set
    return stop


def error_text(e: BaseException) -> str:
    """An exception as one line for a run's error tag: its message, after its type unless it is an
    `EmbinitError` (a message written for the user)."""
    text = " ".join(str(e).split()) or "(no message)"
    return text if isinstance(e, EmbinitError) else f"{type(e).__name__}: {text}"


def _close_sweep(exp_id: str, uri: str, parent: str, reason: str, status: str, tag: str | None,
                 details: str | None = None) -> None:
    """Close the sweep's run (and its trial runs still RUNNING) as `status` with `reason`. Best effort:
    a store that fails now as well is said on stderr, and the caller's exception stays the one raised."""
    try:
        run_writers.close_orphans(exp_id, uri, parent, reason, status=status, tag=tag)
        run_writers.close_sweep_run(parent, uri, reason, status, tag, details)
    except Exception as e:   # the error being handled is the one to report
        print(f"[embinit] could not close the sweep's MLflow run {parent} ({status}): {error_text(e)}",
              file=sys.stderr, flush=True)


def _close_abandoned(exp_id: str, uri: str, parent: str, how: str, error: str | None) -> None:
    """embinit.sweep.abandon's closer: interrupted by the signal `how`, or failed with `error` (Ray died)."""
    if error is None:
        _close_sweep(exp_id, uri, parent, interrupted_reason(how), *records.INTERRUPTED)
    else:
        _close_sweep(exp_id, uri, parent, f"the sweep failed: {error}", "FAILED", None)


def run_sweep(spec: Any, address: str | None = None, tracking_uri: str | None = None,
              progress: bool | Callable[[dict], None] = True, stop: StopFlag = None, *,
              storage_path: str | None = None, extra_callbacks: Callable | None = None,
              store_uri: str | None = None, advice: DataAdvice | None = None) -> SweepResult:
    """Run every trial of `spec` that MLflow has no finished run for, on local Ray (started and
    stopped here) or the cluster at `address`; returns the sweep's trials and its report.

    progress: True prints a status line to stderr, a callable receives the counts dict instead.
    stop: a threading.Event or a callable; once true, running trials stop and no new ones start.
    extra_callbacks: `f(TrialConfig) -> [trainer callbacks]`, called in the worker (tests, probes).
    store_uri: the database behind `tracking_uri` when that is an `mlflow server`: the trials' run
    records are written and read there directly, their artifacts still go through the server
    (docs/deployment.md); checked to be that server's store before anything starts.
    advice: how the caller gives a task its data (`embinit.tasks.hub.DataAdvice`), which a trial without
    data advises, in its error and its MLflow record; None: the command line's (--data-dir).
    """
    t0 = time.monotonic()
    spec = spec if isinstance(spec, ExperimentSpec) else load_spec(spec)
    if address is None:
        check_local_paths(spec)
    planned = tuple(spec.plan())   # the one expansion of this sweep
    check_dimensions(planned, spec.search)   # before anything is written to the store
    store = configured_store()   # the operator's object store, else node-local folders
    storage = _tune_storage(spec, storage_path, store)
    uri = store_check.resolved(tracking_uri or spec.mlflow.tracking_uri)   # a mistyped URI: an error now
    if store_uri:
        check_store_shape(uri, store_uri)   # before the tracking store is opened, or made
    prepare_store(uri)  # create / upgrade a SQL store once, before any trial or reader opens it
    tracking_server.check(uri)   # a server whose every kept-alive request waits ~40 ms: say so, once
    name = spec.experiment_name()
    exp_id = mlflow_store.ensure_experiment(name, uri)
    run_writers.describe_experiment(exp_id, uri, spec.description)
    # where the trial runs are read and written: the server's database itself, when given and checked
    store_uri = check_store_behind(uri, store_uri, name, exp_id) if store_uri else None
    runs = store_uri or uri
    say = _sayer(progress)
    for line in run_writers.close_dead_sweeps(exp_id, uri, runs):   # an earlier driver killed outright
        if say:
            say(line)
    done = run_readers.trial_records(exp_id, runs, "FINISHED")   # read once: the keys reused, and those not
    finished = set(run_readers.finished_keys(exp_id, runs, done))
    if say and not spec.drawn:   # an Optuna search's keys are drawn while it runs
        for line in notice_lines(name, planned, done):   # a spec edited since: its earlier trials retrain
            say(line)
    units, reused = units_to_run(spec, finished, planned)
    linked = _earlier_sweep(spec, units, exp_id, uri)
    if linked is not None:  # nothing to train: no new, empty sweep run
        return _print_report(_finish(spec, uri, runs, exp_id, linked, planned, reused, False, t0, linked=True,
                                     finished=finished), progress)
    parent = run_writers.start_parent_run(exp_id, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials(),
                                          run_name=spec.name)
    guardian.opened(exp_id, uri, runs, parent)   # should this process end before it closes them
    # From here on the sweep's run is open: however this ends, it is closed (never left RUNNING).
    try:
        provenance.record(parent, uri)   # the command, machine, version and commit, for the documents
        shared = SweepContext(uri, exp_id, parent, log_checkpoint=spec.mlflow.log_checkpoint,
                              log_plots=spec.mlflow.log_plots, log_outputs=spec.mlflow.log_outputs,
                              cache_dir=spec.cache_dir,
                              analyses=shared_settings(spec), storage=store,
                              trainer=spec.execution.trainer, store_uri=store_uri, advice=advice)
        job = TuneJob(spec, planned, shared, storage, progress, _stop_fn(stop), extra_callbacks, address, reused)
        # should the local Ray die under the driver (a signal with it, or none), the driver closes the runs
        with abandon.closing(lambda how, error: _close_abandoned(exp_id, uri, parent, how, error)), \
                driver_liveness.heartbeat(parent, uri):
            cancelled = _execute(job, units)
        reason = ("cancelled" if cancelled else
                  "the trial did not finish: its worker died more often than `retries` allows, or Ray stopped it")
        run_writers.close_orphans(exp_id, uri, parent, reason, status="KILLED" if cancelled else "FAILED")
        if not spec.drawn:   # an Optuna trial's key is drawn in its worker: the plan's is not it
            from embinit.sweep import gave_up
            gave_up.record(exp_id, shared.runs_uri, parent, job.gave_up)
        result = _finish(spec, uri, runs, exp_id, parent, planned, reused, cancelled, t0, finished=finished)
        result.tune_errors = list(job.errors)
    except KeyboardInterrupt as e:  # Ctrl-C (or SIGTERM, SIGHUP from the command line): not a failure; a rerun resumes
        _close_sweep(exp_id, uri, parent, interrupted_reason(how_interrupted(e)), *records.INTERRUPTED)
        raise
    except BaseException as e:   # the sweep's run and its unfinished trials say why, then the caller is told
        _close_sweep(exp_id, uri, parent, f"the sweep failed: {error_text(e)}", "FAILED", None,
                     traceback.format_exc())
        raise
    finally:
        guardian.closed(parent)
    _print_report(result, progress)
    return result


def _tune_storage(spec: ExperimentSpec, storage_path: str | None, store: str | None) -> Path | str:
    """Where Tune keeps its state and trial checkpoints: the object store when one is configured (every
    node reaches it, so a trial restarted on another node finds its checkpoint), else a local folder,
    resolved and checked now, as used."""
    if store is not None:
        from embinit.sweep.claims import check_store
        check_store(Store.from_uri(store))  # reachable, and its conditional writes work, before anything starts
    if store is not None and storage_path is None:
        return Store.from_uri(store).tune_storage()
    storage = Path(storage_path or Path(spec.cache_dir or ".embinit-cache") / "ray_results").absolute()
    return check_writable(storage, "Tune's storage folder")


def _earlier_sweep(spec: ExperimentSpec, units: list[Unit], exp_id: str, uri: str) -> str | None:
    """The spec's finished sweep run when this sweep has nothing to train (an Optuna search always
    draws), else None."""
    if units or spec.drawn:
        return None
    return run_readers.finished_sweep(exp_id, uri, spec.spec_hash())


def _execute(job: TuneJob, units: list[Unit]) -> bool:
    """Train the units (an Optuna search: its points); True when cancelled through `job.should_stop`."""
    spec = job.spec
    if spec.drawn:
        from embinit.sweep.optuna_search import run_optuna  # imports ray
        return run_optuna(job)
    if not units:
        return False
    from embinit.sweep.warmup import prepare_here, prepare_on_ray
    say = _sayer(job.progress)
    warm = None   # a Ray started here for this machine alone: the warm-up runs beside it while it starts
    if _starts_local_ray(job.address):
        check_fits_machine(spec.resources)   # a sure misfit: said before any data work
        if spec.execution.trainer != "noop":
            warm = prepare_here(units, spec.cache_dir)
    try:
        from embinit.sweep.gpu_share import check_on_ray
        from embinit.sweep.tune_run import run_tune  # imports ray
        with RayRuntime(job.address, spec.resources):
            if spec.execution.fuses(spec.resources.gpus):   # groups for the slots this cluster has
                slots = parallel_slots(spec.resources.cpus, spec.resources.gpus, spec.max_concurrent)
                units = fused_units(units, spec.execution, slots)
            elif spec.execution.fuse == "auto" and say:
                say(CPU_NOTE)
            units = pack_units(units, spec.execution.trials_per_unit)
            check_on_ray(spec.resources.gpus)       # several trials per GPU without MPS: say so once
            if spec.execution.trainer != "noop":    # the noop trainer reads no data
                # tokenize / align once, before the fan-out
                warm.result() if warm is not None else prepare_on_ray(units, spec.cache_dir, say)
            return run_tune(job, units)
    finally:   # however this ends (Ray's start failed, Ctrl-C, ...): no warm-up goes on without the sweep
        if warm is not None:
            warm.stop()


def _sayer(progress) -> Callable[[str], None] | None:
    """How the sweep says a line besides its trials' progress (stderr, after `[embinit]`) when it prints its
    progress (`progress` True); None when it does not (a callable sink, or False)."""
    if progress is not True:
        return None
    return lambda text: print(f"[embinit] {text}", file=sys.stderr, flush=True)


def _starts_local_ray(address: str | None) -> bool:
    """Whether `RayRuntime(address)` will start a Ray for this machine alone: no address, and no Ray
    this process is connected to already (the caller's: a service driver's, a test's)."""
    ray = sys.modules.get("ray")   # not imported: not connected (importing it here would delay the warm-up)
    return address is None and not (ray is not None and ray.is_initialized())


def _finish(spec, uri, runs, exp_id, parent, planned, reused, cancelled, t0, linked=False,
            finished: set[str] = frozenset()) -> SweepResult:
    """The sweep's result and report, the trial runs read from `runs` (`uri`, or the database behind it);
    the sweep's run closed with them unless `linked` (an earlier sweep's). `finished`: the keys with a
    finished run when the sweep started."""
    from embinit.report.completeness import planned_trials
    from embinit.report.table import build_report
    keys = {p.key for p in planned}
    search = spec.drawn
    every = run_readers.experiment_records(spec.experiment_name(), runs)
    chosen = records.by_key(every, None if search else keys)
    rows = [run_readers.trial_row(r) for r in chosen.values()]
    # The plan says what never finished; an Optuna search has none to compare with (drawn at run time).
    report = build_report(spec.experiment_name(), runs, keys=None if search else keys,
                          planned=[] if search else planned_trials(planned), chosen=chosen)
    elsewhere = records.trained_elsewhere(chosen, {parent})
    if search:   # its keys are drawn while it runs: those finished before it started are reused, not shared
        reused = len(elsewhere & finished)
    shared = max(0, len(elsewhere) - reused)
    result = SweepResult(spec.experiment_name(), exp_id, parent, uri, len(planned) if not search else
                         spec.num_trials(), reused, rows, cancelled, time.monotonic() - t0, report,
                         linked=linked, shared=shared)
    if not linked:
        _tag_points(uri, list(records.by_key(every, None).values()), every)   # `embinit report`'s trials
        _close_parent(spec, uri, parent, result, report)
    return result


def _tag_points(uri, trials, every) -> None:
    """Mark each search trial of the experiment (`trials`: one run per key, as `embinit report` reads them) as
    its report row's point or not, and give every run (`every`) the `embinit.cell` of its report row
    (embinit.report.point_tags): only the runs whose tags change are written."""
    from mlflow.entities import RunTag

    from embinit.report.point_tags import cell_tags, point_tags
    c = mlflow_store.client(uri)
    tags = point_tags(trials)
    for run_id, cell in cell_tags(every).items():
        tags.setdefault(run_id, {})[records.CELL_TAG] = cell
    try:
        for run_id, values in tags.items():
            mlflow_store.log_batch(c, run_id, tags=[RunTag(k, v) for k, v in values.items()])
    except Exception as e:   # labels for MLflow's run table: a store failing now is said, not the sweep's failure
        print(f"[embinit] could not update the search-point and cell tags of the experiment's runs "
              f"({error_text(e)}); the next sweep into it sets them", file=sys.stderr, flush=True)


def _print_report(result: SweepResult, progress) -> SweepResult:
    """The report on stdout when the sweep prints its progress (after its run is closed: a closed pipe
    is no failure of the sweep)."""
    if progress is True:
        print(result.report.to_markdown(), flush=True)
    return result


def _close_parent(spec, uri, parent, result, report) -> None:
    """End the sweep's run with its counts, its report (markdown, CSV, JSON, LaTeX) and the figures."""
    reused, cancelled = result.reused, result.cancelled
    counts = {"planned": result.planned, "reused": reused, "shared": result.shared, "finished": result.n_finished,
              "failed": result.n_failed, "wall_s": result.wall_s}
    with tempfile.TemporaryDirectory() as tmp:
        files = tuple(("report", str(Path(tmp) / name)) for name in ("report.csv", "report.json", "report.tex"))
        for (_, path), text in zip(files, (report.to_csv(), report.to_json(), report.to_latex())):
            Path(path).write_text(text)
        if spec.mlflow.log_plots and report.rows:  # Figure-1-style mean curves per init
            files += tuple(("figures", str(p)) for p in report.plot(Path(tmp) / "figures"))
        status = run_writers.sweep_status(cancelled, result.n_finished, result.planned)
        run_writers.end_parent_run(parent, uri, status, report.to_markdown(), counts, files)
