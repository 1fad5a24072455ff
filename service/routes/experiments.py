"""Experiments: submit a spec, follow it, read its trials and results, cancel it."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import func, select
from sqlalchemy.orm import defer

from embinit.report.baseline import UnknownBaseline
from embinit.task_registry import scoped
from service import submission, views
from service.db import TERMINAL, Experiment, utcnow
from service.deps import (BodyDep, ReconcilerDep, RunnerDep, SessionDep, SettingsDep, StoreDep, require_read,
                          require_write)
from service.http_rules import known_query_names, single_query_values
from service.problems import unprocessable
from service.schemas import ExperimentDetail, ExperimentPage, Status, Submitted, TrialPage
from service.specs import JSON_TYPES, YAML_TYPES, parse_body, prepare
from service.store import REPORT_VERSION

log = logging.getLogger("embinit.service")
# A repeated query parameter (`?limit=5&limit=6`) is a 422 on every route here.
router = APIRouter(prefix="/experiments", tags=["experiments"],
                   dependencies=[Depends(single_query_values), Depends(known_query_names)])
MAX_OFFSET = 2 ** 31 - 1  # a bigger offset overflows the database's integer (found by the fuzz test)

SPEC_BODY = {"requestBody": {"required": True, "content": {
    **{t: {"schema": {"$ref": "#/components/schemas/ExperimentSpec"}} for t in JSON_TYPES},
    **{t: {"schema": {"type": "string", "description": "the same spec as YAML"}} for t in YAML_TYPES[:1]}}}}


def _get(session, exp_id: str) -> Experiment:
    exp = session.get(Experiment, exp_id) if len(exp_id) <= 32 else None
    if exp is None:
        raise HTTPException(404, detail=f"experiment {exp_id!r} not found")
    return exp


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
    with scoped():   # the tasks this spec defines are seen by this request alone (embinit.task_registry)
        sub = prepare(parse_body(body, request.headers.get("content-type")), settings, store.tracking_uri,
                      more=lambda spec: submission.problems(spec, session, settings, runner, store))
        outcome = submission.submit(sub, rerun, session, settings, runner, store, reconciler)
    if not outcome.created:
        response.status_code = 200
    return _submitted(outcome.experiment, created=outcome.created, notices=[*sub.notices, *outcome.notices])


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
MEDIA = {"json": JSON, "markdown": "text/markdown; charset=utf-8", "csv": "text/csv; charset=utf-8",
         "latex": "application/x-latex; charset=utf-8"}


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
    """Each trial's config, axes and search point, status, best metric, MLflow run id and run name."""
    state = request.app.state

    def build(session):
        exp = state.reconciler.refresh(session, _get(session, exp_id))
        session.commit()  # no database connection held across the MLflow read
        trials = state.store.trials(exp)
        page = TrialPage(items=trials[offset:offset + limit], total=len(trials), limit=limit, offset=offset)
        return page.model_dump_json().encode(), JSON, exp.status in TERMINAL
    return await _read(request, ("trials", exp_id, limit, offset), build)


@router.get("/{exp_id}/results", dependencies=[Depends(require_read)],
            responses={200: {"content": {"application/json": {}, "text/markdown": {}, "text/csv": {},
                                           "application/x-latex": {}}}})
async def get_results(exp_id: str, request: Request,
                      format: Annotated[Literal["json", "markdown", "csv", "latex"], Query()] = "json",
                      baseline: Annotated[str | None, Query(min_length=1, max_length=200, description=(
                          "the init label each init is compared with (default Xavier)"))] = None):
    """The Table-1 aggregation of the experiment's MLflow runs (JSON, markdown, CSV or a LaTeX
    table for a paper), each init compared with a baseline init."""
    state = request.app.state

    def build(session):
        exp = state.reconciler.refresh(session, _get(session, exp_id))
        session.commit()  # no database connection held across the MLflow read
        finished = exp.status in TERMINAL
        if baseline is not None:  # another baseline than the stored report's: built on demand
            try:
                return state.store.report(exp, baseline)[format].encode(), MEDIA[format], finished
            except UnknownBaseline as e:  # a problem of the query parameter, like an unknown `format`
                raise unprocessable([("query.baseline", str(e))]) from None
        stored = exp.report if (exp.report or {}).get("version") == REPORT_VERSION else None
        rendered = stored or state.store.report(exp)
        if finished and stored is None:
            exp.report = rendered  # kept in the state database: a restarted API does not rebuild it
            session.commit()
        return rendered[format].encode(), MEDIA[format], finished
    return await _read(request, ("results", exp_id, format, baseline), build)


# A DELETE's 409, per final state, in words that read ("has already succeeded", not "is already succeeded").
ENDED = {"succeeded": "has already succeeded", "failed": "has already failed", "cancelled": "is already cancelled"}


@router.delete("/{exp_id}", response_model=ExperimentDetail, status_code=202,
               dependencies=[Depends(require_write)])
def cancel(exp_id: str, session: SessionDep, settings: SettingsDep, runner: RunnerDep,
           reconciler: ReconcilerDep):
    """Cancel an experiment: running trials stop, finished results stay."""
    exp = reconciler.refresh(session, _get(session, exp_id), force=True)  # it may have ended since last read
    if exp.status in TERMINAL:
        raise HTTPException(409, detail=f"experiment {exp_id} {ENDED[exp.status]}")
    if exp.cancel_requested_at is None:
        exp.cancel_requested_at = exp.updated_at = utcnow()
        session.commit()
    session.refresh(exp, ["driver"])  # a driver started meanwhile (service.submission reads the cancel too)
    if exp.driver:
        try:
            runner.cancel(exp.driver)
        except Exception as e:  # Ray unreachable now: the cancel stays recorded (the grace period enforces it)
            log.warning("could not tell driver %s to cancel", exp.driver, exc_info=True)
            raise HTTPException(503, headers={"Retry-After": "10"}, detail=(
                f"the cancel of experiment {exp_id} is recorded, but its Ray driver could not be told now "
                f"({type(e).__name__}: {e}); send the DELETE again to retry")) from None
    return views.summary(reconciler.refresh(session, exp, force=True), settings, detail=True)
