"""Submitting a prepared spec: refuse another team's MLflow experiment, answer a resubmission with the
experiment it already has, keep to the limit of active experiments, record the experiment and start
its driver. The route (service/routes/experiments.py) parses and validates; this module decides."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field

from fastapi import HTTPException
from sqlalchemy import func, select
from sqlalchemy.orm import defer

from embinit.redact import scrubbed
from service.db import ACTIVE, Experiment, utcnow
from service.limits import resource_problems
from service.problems import unprocessable
from service.specs import Submission

_submit_lock = threading.Lock()  # dedup + limit + insert must not interleave within this process


@dataclass
class Outcome:
    experiment: Experiment
    created: bool      # False: the same spec was submitted before (answered with 200, not 202)
    notices: list[str] = field(default_factory=list)   # what the client should know about this outcome


def nodes(runner) -> list[dict[str, float]] | None:
    """Each node's total resources, None when the runner cannot tell (then nothing is checked)."""
    try:
        return runner.nodes() if hasattr(runner, "nodes") else None
    except Exception:  # a cluster that cannot say is not checked; start() will tell
        return None


def active_count(session) -> int:
    return session.scalar(select(func.count()).select_from(Experiment).where(Experiment.status.in_(ACTIVE)))


def foreign_experiment(session, store, spec) -> list[tuple[str, str]]:
    """`mlflow.experiment` may name a new MLflow experiment, or one this service already fills for
    specs of the same name; never another team's (its runs would be reused and its results mixed)."""
    target = spec.mlflow.experiment
    if not target or target == spec.name:
        return []
    users = set(session.scalars(select(Experiment.name).where(Experiment.mlflow_experiment == target)))
    session.commit()  # no database connection held across the MLflow read below
    if users - {spec.name}:
        others = sorted(users - {spec.name})
        return [("mlflow.experiment", f"MLflow experiment {target!r} holds the runs of "
                                      f"{'another spec' if len(others) == 1 else 'other specs'} submitted to this "
                                      f"service (named {', '.join(map(repr, others))}; this one is "
                                      f"{spec.name!r}); choose another name")]
    if not users and store.has_experiment(target):
        return [("mlflow.experiment", f"{target!r} already exists in the MLflow store and was not created "
                                      f"by this service for {spec.name!r}; choose another name")]
    return []


def problems(spec, session, settings, runner, store) -> list[tuple[str, str]]:
    """What this service finds wrong with a valid spec: trials no node can run, another team's MLflow
    experiment. Passed to `service.specs.prepare`, so one 422 lists them with the spec's own problems."""
    return (resource_problems(spec, nodes(runner) if settings.check_cluster_resources else None)
            + foreign_experiment(session, store, spec))


def submit(sub: Submission, rerun: bool, session, settings, runner, store, reconciler) -> Outcome:
    """Record and start the experiment of `sub` (or return the one this spec already has); `sub` passed
    `problems` when it was prepared."""
    with _submit_lock:
        problems = foreign_experiment(session, store, sub.spec)  # again: another spec may have taken it since
        if problems:
            raise unprocessable(problems, settings.max_problems)
        existing, changed = _existing(session, sub, rerun, reconciler)
        if existing is not None:
            return Outcome(existing, created=False, notices=_ended_short(existing))
        notices = [_changed_files(changed)] if changed is not None else []
        _check_limit(session, settings, reconciler)
        exp = Experiment(id=uuid.uuid4().hex[:12], name=sub.spec.name, spec=sub.data, spec_hash=sub.spec_hash,
                         trial_keys=sub.trial_keys, n_trials=sub.n_trials, status="queued",
                         counts={"pending": sub.n_trials}, tracking_uri=store.tracking_uri,
                         mlflow_experiment=sub.spec.experiment_name())
        session.add(exp)
        session.commit()
    _start(exp, sub, session, runner, store)
    return Outcome(exp, created=True, notices=notices)


# How many of a spec's newest experiments a submission compares its trial keys with (each holds up to
# thousands of keys); one older than these is not found, and the submission is a new experiment, which
# reuses every trial MLflow has.
SAME_SPEC_LOOKBACK = 100


def _changed_files(other: Experiment) -> str:
    return (f"experiment {other.id} has this spec, but the content of its files has changed since: this "
            f"experiment trains on the files as they are now")


def _ended_short(exp: Experiment) -> list[str]:
    """What a resubmission answered with a failed or cancelled experiment must say: nothing starts again
    unless asked (its trials that did not finish are run by a rerun, its finished ones reused)."""
    if exp.status not in ("failed", "cancelled"):
        return []
    return [f"experiment {exp.id} with this spec is {exp.status} and was not started again; submit with "
            f"?rerun=true (`embinit experiments submit --rerun`) to run the trials it did not finish "
            f"(finished ones are reused)"]


def _existing(session, sub: Submission, rerun: bool, reconciler) -> tuple[Experiment | None, Experiment | None]:
    """(the newest experiment of this spec and its files' content, when it is to be answered as it is (no
    rerun asked); the newest of this spec over other file content, when there is no such experiment). The
    same spec over changed files (a pretrained file replaced in place) has other trials, whose keys hash
    the content: the old experiment's results are not this submission's."""
    same_spec = session.scalars(select(Experiment).where(Experiment.spec_hash == sub.spec_hash)
                                .options(defer(Experiment.spec), defer(Experiment.report))
                                .order_by(Experiment.created_at.desc()).limit(SAME_SPEC_LOOKBACK)).all()
    # an experiment whose driver never started ran nothing: the same POST again (its 503 says so) starts it
    same_spec = [e for e in same_spec if not (e.status == "failed" and not e.driver)]
    existing = next((e for e in same_spec if e.trial_keys == sub.trial_keys), None)
    if existing is None:
        return None, (same_spec[0] if same_spec else None)
    reconciler.refresh(session, existing)
    if not rerun:
        return existing, None
    if existing.status in ACTIVE and existing.cancel_requested_at is not None:  # a DELETE, then a rerun
        raise HTTPException(409, headers={"Retry-After": "5"},
                            detail=f"experiment {existing.id} with this spec is being cancelled (its running "
                                   f"trials are stopping); re-run it once its status is cancelled")
    if existing.status in ACTIVE:  # two drivers would train the same trials side by side
        raise HTTPException(409, detail=f"experiment {existing.id} with this spec is still "
                                        f"{existing.status}; cancel it or wait before re-running")
    return None, None


def _check_limit(session, settings, reconciler) -> None:
    active = active_count(session)
    if active >= settings.max_active_experiments:  # at the limit: are they really still running?
        reconciler.refresh_active(session)
        active = active_count(session)
    if active >= settings.max_active_experiments:
        raise HTTPException(429, headers={"Retry-After": "60"},
                            detail=f"{active} experiments are queued or running; this service runs at "
                                   f"most {settings.max_active_experiments} at once, retry later")


def _start(exp: Experiment, sub: Submission, session, runner, store) -> None:
    try:
        exp.driver = runner.start(exp.id, sub.data, store.tracking_uri, sub.trial_keys, store_uri=store.trial_store_uri)
        exp.ray_cluster = runner.cluster_id() if hasattr(runner, "cluster_id") else None
    except Exception as e:  # recorded on the experiment, reported to the client (the stores' passwords hidden)
        why = scrubbed(str(e), [store.tracking_uri, store.trial_store_uri])
        exp.status, exp.error, exp.finished_at = "failed", f"could not start the Ray driver: {why}", utcnow()
        session.commit()
        raise HTTPException(503, headers={"Retry-After": "10"}, detail=(
            f"experiment {exp.id} could not be started: {why}; nothing ran: send the same request again to "
            f"retry")) from None
    session.commit()
    # A cancel that came while the driver was starting found no driver to tell (the route tells it when
    # it reads a driver name after recording the cancel): read the cancel after recording the name, so
    # one of the two tells the driver, whichever way they interleave.
    session.refresh(exp, ["cancel_requested_at"])
    if exp.cancel_requested_at is not None:
        runner.cancel(exp.driver)
