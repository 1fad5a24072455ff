"""Experiments: submit a spec, follow it, read its trials and results, cancel it."""

from __future__ import annotations

import threading
import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import func, select
from sqlalchemy.orm import defer

from service import views
from service.db import ACTIVE, TERMINAL, Experiment, utcnow
from service.deps import (BodyDep, ReconcilerDep, RunnerDep, SessionDep, SettingsDep, StoreDep, require_read,
                          require_write)
from service.schemas import ExperimentDetail, ExperimentPage, Status, Submitted, TrialPage
from service.specs import JSON_TYPES, YAML_TYPES, parse_body, prepare, problems_detail, resource_problems

router = APIRouter(prefix="/experiments", tags=["experiments"])
_submit_lock = threading.Lock()  # dedup + limit + insert must not interleave within this process
MAX_OFFSET = 2 ** 31 - 1  # a bigger offset overflows the database's integer (found by the fuzz test)

SPEC_BODY = {"requestBody": {"required": True, "content": {
    **{t: {"schema": {"$ref": "#/components/schemas/ExperimentSpec"}} for t in JSON_TYPES},
    **{t: {"schema": {"type": "string", "description": "the same spec as YAML"}} for t in YAML_TYPES[:1]}}}}


def _get(session, exp_id: str) -> Experiment:
    exp = session.get(Experiment, exp_id) if len(exp_id) <= 32 else None
    if exp is None:
        raise HTTPException(404, detail=f"experiment {exp_id!r} not found")
    return exp


def _active_count(session) -> int:
    return session.scalar(select(func.count()).select_from(Experiment).where(Experiment.status.in_(ACTIVE)))


def _nodes(runner) -> list[dict[str, float]] | None:
    """Each node's total resources, None when the runner cannot tell (then nothing is checked)."""
    try:
        return runner.nodes() if hasattr(runner, "nodes") else None
    except Exception:  # a cluster that cannot say is not checked; start() will tell
        return None


def _foreign_experiment(session, store, spec) -> list[tuple[str, str]]:
    """`mlflow.experiment` may name a new MLflow experiment, or one this service already fills for
    specs of the same name; never another team's (its runs would be reused and its results mixed)."""
    target = spec.mlflow.experiment
    if not target or target == spec.name:
        return []
    users = set(session.scalars(select(Experiment.name).where(Experiment.mlflow_experiment == target)))
    if users - {spec.name}:
        return [("mlflow.experiment", f"{target!r} holds the runs of other experiments "
                                      f"({', '.join(sorted(users - {spec.name}))}); choose another name")]
    if not users and store.has_experiment(target):
        return [("mlflow.experiment", f"{target!r} already exists in the MLflow store and was not created "
                                      f"by this service for {spec.name!r}; choose another name")]
    return []


def _submitted(exp: Experiment, created: bool, notices: list[str] = ()) -> Submitted:
    links = views.links(exp.id)
    return Submitted(id=exp.id, n_trials=exp.n_trials, status=exp.status, created=created,
                     spec_hash=exp.spec_hash, status_url=links.status, results_url=links.results,
                     notices=list(notices))


@router.post("", status_code=202, response_model=Submitted, dependencies=[Depends(require_write)],
             openapi_extra=SPEC_BODY, responses={200: {"model": Submitted, "description": "already submitted"},
                                                 409: {}, 413: {}, 415: {}, 422: {}, 429: {}})
def submit(request: Request, response: Response, body: BodyDep, session: SessionDep, settings: SettingsDep,
           runner: RunnerDep, store: StoreDep, reconciler: ReconcilerDep,
           rerun: Annotated[bool, Query(description="start again even if this spec was submitted")] = False):
    """Submit an experiment spec (JSON, or YAML with a YAML content type)."""
    data = parse_body(body, request.headers.get("content-type"))
    sub = prepare(data, settings, store.tracking_uri)
    problems = resource_problems(sub.spec, _nodes(runner) if settings.check_cluster_resources else None)
    with _submit_lock:
        problems += _foreign_experiment(session, store, sub.spec)
        if problems:
            raise HTTPException(422, detail=problems_detail(problems, settings.max_problems))
        existing = session.scalars(select(Experiment).where(Experiment.spec_hash == sub.spec_hash)
                                   .order_by(Experiment.created_at.desc()).limit(1)).first()
        if existing is not None:
            reconciler.refresh(session, existing)
            if not rerun:
                response.status_code = 200
                return _submitted(existing, created=False, notices=sub.notices)
            if existing.status in ACTIVE:  # two drivers would train the same trials side by side
                raise HTTPException(409, detail=f"experiment {existing.id} with this spec is still "
                                                f"{existing.status}; cancel it or wait before re-running")
        active = _active_count(session)
        if active >= settings.max_active_experiments:  # at the limit: are they really still running?
            reconciler.refresh_active(session)
            active = _active_count(session)
        if active >= settings.max_active_experiments:
            raise HTTPException(429, headers={"Retry-After": "60"},
                                detail=f"{active} experiments are queued or running; this service runs at "
                                       f"most {settings.max_active_experiments} at once, retry later")
        exp = Experiment(id=uuid.uuid4().hex[:12], name=sub.spec.name, spec=sub.data, spec_hash=sub.spec_hash,
                         trial_keys=sub.trial_keys, n_trials=sub.n_trials, status="queued",
                         counts={"pending": sub.n_trials}, tracking_uri=store.tracking_uri,
                         mlflow_experiment=sub.spec.experiment_name())
        session.add(exp)
        session.commit()
    try:
        exp.driver = runner.start(exp.id, sub.data, store.tracking_uri, sub.trial_keys)
    except Exception as e:  # recorded on the experiment, reported to the client
        exp.status, exp.error, exp.finished_at = "failed", f"could not start the Ray driver: {e}", utcnow()
        session.commit()
        raise HTTPException(503, detail=f"experiment {exp.id} could not be started: {e}") from None
    session.commit()
    return _submitted(exp, created=True, notices=sub.notices)


@router.get("", response_model=ExperimentPage, dependencies=[Depends(require_read)])
def list_experiments(session: SessionDep, settings: SettingsDep, reconciler: ReconcilerDep,
                     status: Annotated[Status | None, Query(description="only experiments in this state")] = None,
                     limit: Annotated[int, Query(ge=1, le=1000)] = 50,
                     offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0):
    """List experiments, newest first, optionally only those in one state."""
    limit = min(limit, settings.max_page_size)
    reconciler.refresh_active(session)
    # The list never shows specs, trial keys or reports: do not load them.
    query = select(Experiment).options(defer(Experiment.spec), defer(Experiment.trial_keys),
                                       defer(Experiment.report))
    if status is not None:
        query = query.where(Experiment.status == status)
    total = session.scalar(select(func.count()).select_from(query.subquery()))
    rows = session.scalars(query.order_by(Experiment.created_at.desc()).limit(limit).offset(offset))
    return ExperimentPage(items=[views.summary(e, settings) for e in rows], total=total, limit=limit,
                          offset=offset)


JSON = "application/json"
MEDIA = {"json": JSON, "markdown": "text/markdown; charset=utf-8", "csv": "text/csv; charset=utf-8"}


async def _read(request: Request, key: tuple, build) -> Response:
    """Serve a read: from memory when the experiment is finished and was read before, else built from
    the database (and MLflow) in a worker thread; `build(session)` -> (body, media type, finished)."""
    cache = request.app.state.responses
    hit = cache.get(key)
    if hit is None:
        hit = await run_in_threadpool(_build, request.app.state.sessions, key, build, cache)
    return Response(content=hit[0], media_type=hit[1])


def _build(sessions, key: tuple, build, cache) -> tuple[bytes, str]:
    with sessions() as session:
        body, media, finished = build(session)
    if finished:
        cache.put(key, (body, media))
    return body, media


@router.get("/{exp_id}", response_model=ExperimentDetail, dependencies=[Depends(require_read)])
async def get_experiment(exp_id: str, request: Request):
    """An experiment's status, trial counts, progress, ETA and MLflow link."""
    state = request.app.state  # not dependencies: a cached read should cost next to nothing

    def build(session):
        exp = state.reconciler.refresh(session, _get(session, exp_id))
        body = views.summary(exp, state.settings, detail=True).model_dump_json().encode()
        return body, JSON, exp.status in TERMINAL
    return await _read(request, ("status", exp_id), build)


@router.get("/{exp_id}/trials", response_model=TrialPage, dependencies=[Depends(require_read)])
async def get_trials(exp_id: str, request: Request, limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
                     offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0):
    """Each trial's config, status, best metric and MLflow run id."""
    state = request.app.state

    def build(session):
        exp = state.reconciler.refresh(session, _get(session, exp_id))
        trials = state.store.trials(exp)
        page = TrialPage(items=trials[offset:offset + limit], total=len(trials), limit=limit, offset=offset)
        return page.model_dump_json().encode(), JSON, exp.status in TERMINAL
    return await _read(request, ("trials", exp_id, limit, offset), build)


@router.get("/{exp_id}/results", dependencies=[Depends(require_read)],
            responses={200: {"content": {"application/json": {}, "text/markdown": {}, "text/csv": {}}}})
async def get_results(exp_id: str, request: Request,
                      format: Annotated[Literal["json", "markdown", "csv"], Query()] = "json"):
    """The Table-1 aggregation of the experiment's MLflow runs (JSON, markdown or CSV)."""
    state = request.app.state

    def build(session):
        exp = state.reconciler.refresh(session, _get(session, exp_id))
        rendered = exp.report or state.store.report(exp)
        finished = exp.status in TERMINAL
        if finished and exp.report is None:
            exp.report = rendered  # kept in the state database: a restarted API does not rebuild it
            session.commit()
        return rendered[format].encode(), MEDIA[format], finished
    return await _read(request, ("results", exp_id, format), build)


@router.delete("/{exp_id}", response_model=ExperimentDetail, status_code=202,
               dependencies=[Depends(require_write)])
def cancel(exp_id: str, session: SessionDep, settings: SettingsDep, runner: RunnerDep,
           reconciler: ReconcilerDep):
    """Cancel an experiment: running trials stop, finished results stay."""
    exp = _get(session, exp_id)
    if exp.status in TERMINAL:
        raise HTTPException(409, detail=f"experiment {exp_id} is already {exp.status}")
    if exp.cancel_requested_at is None:
        exp.cancel_requested_at = exp.updated_at = utcnow()
        session.commit()
    if exp.driver:
        runner.cancel(exp.driver)
    return views.summary(reconciler.refresh(session, exp, force=True), settings, detail=True)
