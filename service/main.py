"""Builds the FastAPI app: routes, error handlers, the state database, the runner and the MLflow store.

    uvicorn --factory service.main:create_app      # or: embinit serve

`create_app(settings, runner=None, store=None)`: without a runner, a `RayRunner` on `settings.ray_address`
(a local Ray when unset) is connected at startup; every unfinished experiment is then reconciled with
Ray and MLflow, so a restarted API shows the true state at once.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline

import embinit
from embinit.spec import ExperimentSpec
from embinit.redact import masked, scrubbed
from service.response_cache import ResponseCache
from service.db import Experiment, make_sessionmaker
from service.http_rules import install_http_rules
from service.lease import Lease, LeaseHeld
from service.monitor import Monitor
from service.paths import roots_line
from service.routes import catalog, experiments, health
from service.settings import Settings, get_settings
from service.problems import install_problem_handlers
from service.schemas import Problems
from service.state import Reconciler
from service.store import ResultStore, absolute_sqlite_uri
from service.store_guard import GuardedStore, StoreUnavailable

log = logging.getLogger("embinit.service")


def _install_error_handlers(app: FastAPI) -> None:
    install_http_rules(app)
    install_problem_handlers(app)   # every 422: {"detail": [{"loc": str, "msg": str}, ...]}

    @app.exception_handler(StoreUnavailable)
    async def _store_down(_request: Request, exc: StoreUnavailable):
        return JSONResponse(status_code=503, content={"detail": scrubbed(str(exc), app.state.settings.secret_uris())},
                            headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(Exception)
    async def _bug(_request: Request, exc: Exception):
        log.exception("unhandled error", exc_info=exc)
        return JSONResponse(status_code=500, content={"detail": f"internal error ({type(exc).__name__}); "
                                                                f"see the service log"})


def _openapi(app: FastAPI):
    # The submit endpoint parses its body itself (JSON or YAML); publish the spec's schema for it.
    def build():
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            spec = ExperimentSpec.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(spec.pop("$defs", {}))
            components["ExperimentSpec"] = spec
            problems = Problems.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(problems.pop("$defs", {}))
            components["Problems"] = problems
            _document_auth_and_errors(schema, app.state.settings)
            for unused in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422, which this API never answers
                components.pop(unused, None)
            app.openapi_schema = schema
        return app.openapi_schema
    return build


ERROR = {"content": {"application/json": {"schema": {"type": "object", "properties": {"detail": {"type": "string"}},
                                                                   "required": ["detail"]}}}}
# Every 422 has one shape (service.problems): each problem's field path or parameter and what is wrong.
PROBLEMS = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problems"}}}}
# What each kind of operation may answer besides its success (the schema must say what the API does).
ERRORS = {"401": "missing or invalid bearer token", "404": "no experiment with this id",
          "409": "the experiment is already finished", "400": "the client disconnected mid-upload",
          "408": "the request body did not arrive in time", "413": "the request body is too large",
          "415": "unsupported content type",
          "422": "the request is invalid: every problem listed, each with where it is (`loc`: a spec field's path "
                 "such as `tasks[0].task`, a parameter such as `query.limit`, or \"\" for the whole request) "
                 "and what is wrong (`msg`)",
          "429": "too many experiments are active",
          "503": "the Ray driver could not be started or told to cancel, or the MLflow store did not answer in "
                 "time (Retry-After)"}


def _document_auth_and_errors(schema: dict, settings: Settings) -> None:
    """Security only where a token is really asked for (writes with a token set, reads only when
    `reads_require_token`), with its 401; 404 on every experiment id; the submit's and cancel's errors."""
    for path, ops in schema.get("paths", {}).items():
        for method, op in ops.items():
            guarded = bool(settings.api_token) and (method != "get" or settings.reads_require_token)
            codes = ["422"] if op.get("parameters") or "requestBody" in op else []
            if "security" in op and not guarded:
                del op["security"]
            elif "security" in op:
                codes.append("401")
            if "{exp_id}" in path:
                codes.append("404")
            if method == "delete":
                codes += ["409", "503"]
            if method == "post":
                codes += ["400", "408", "409", "413", "415", "422", "429", "503"]
            if path.endswith(("/trials", "/results")):  # read from MLflow, which may not answer in time
                codes.append("503")
            responses = op.setdefault("responses", {})
            for code in codes:
                if code == "422":   # never FastAPI's own validation error (a list `loc`, `type`, `input`)
                    responses[code] = {"description": ERRORS[code], **PROBLEMS}
                elif code not in responses or not responses[code].get("content"):
                    responses[code] = {"description": ERRORS[code], **ERROR}


def _lifespan(owns_runner: bool):
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # The MLflow store is created or upgraded here, once, before the API accepts work: MLflow would
        # otherwise migrate a new store in whichever process opens it first, and two at once break it.
        prepared = await run_in_threadpool(app.state.store.prepare)
        log.info("MLflow store %s: %s", masked(app.state.store.tracking_uri), prepared)
        try:  # one owner per state database, before any experiment is judged (service.lease)
            await run_in_threadpool(app.state.lease.acquire)
        except LeaseHeld as e:
            log.error("embinit API not started: %s", e)
            raise
        try:
            if owns_runner:
                await run_in_threadpool(app.state.runner.connect)
            rec = app.state.reconciler
            with app.state.sessions() as session:
                await run_in_threadpool(rec.refresh_active, session)
            monitor = Monitor(app.state.sessions, rec, app.state.settings.monitor_interval_s)
            monitor.start()
            yield
            await run_in_threadpool(monitor.stop)
            if owns_runner:
                app.state.runner.shutdown()
        finally:
            app.state.lease.release()
    return lifespan


def _warm(app: FastAPI, exp_id: str) -> None:
    """Render a just-finished experiment's results and trials in the background, so the first reader does
    not wait for a report over (possibly) thousands of MLflow runs."""
    def work():
        try:
            with app.state.sessions() as session:
                exp = session.get(Experiment, exp_id)
                session.commit()  # no database connection held across the MLflow reads
                if exp is not None and exp.report is None:
                    exp.report = app.state.store.report(exp)
                    session.commit()
                if exp is not None:
                    app.state.store.trials(exp)
        except Exception:  # only a warm-up: the first read builds it instead
            log.warning("could not pre-render experiment %s", exp_id, exc_info=True)
    threading.Thread(target=work, daemon=True, name=f"embinit-warm-{exp_id}").start()


def create_app(settings: Settings | None = None, runner=None, store=None) -> FastAPI:
    settings = settings or get_settings()
    if runner is None:
        from service.runner import RayRunner
        runner = RayRunner(settings.ray_address, settings.ray_namespace, settings.ray_node_ip,
                           trusted_roots=[str(r) for r in [*settings.data_roots, *settings.pretrained_roots]],
                           start_grace_s=settings.driver_start_grace_s,
                           gone_confirm_s=settings.driver_gone_confirm_s)
        owns_runner = True
    else:
        owns_runner = False
    # FastAPIOffline: /docs and /redoc load Swagger UI / ReDoc from files the fastapi-offline package
    # installs (served under /static-offline-docs), not from a CDN, so the docs work without internet.
    app = FastAPIOffline(title="embinit", version=embinit.__version__, lifespan=_lifespan(owns_runner),
                  description="Submit embedding-initialization experiments, follow them, read Table 1.",
                  swagger_ui_parameters={"validatorUrl": None})  # no badge fetched from swagger.io
    app.state.settings = settings
    app.state.sessions = make_sessionmaker(absolute_sqlite_uri(settings.database_url))
    app.state.runner = runner
    app.state.responses = ResponseCache()
    app.state.store = GuardedStore(store or ResultStore(settings.tracking_uri, read_uri=settings.tracking_read_uri,
                                                      write_direct=settings.tracking_write_direct),
                                   settings.mlflow_timeout_s,
                                   settings.mlflow_max_concurrency)
    app.state.lease = Lease(app.state.sessions, absolute_sqlite_uri(settings.database_url), settings.lease_ttl_s,
                            settings.lease_wait_s)
    app.state.reconciler = Reconciler(runner, app.state.store, settings,
                                      on_finished=lambda exp_id: _warm(app, exp_id), lease=app.state.lease)
    for module in (experiments, catalog, health):
        app.include_router(module.router)
    _install_error_handlers(app)
    app.openapi = _openapi(app)
    log.info("embinit service: state %s, tracking %s, ray %s (pid %d)", masked(settings.database_url),
             masked(settings.tracking_uri), settings.ray_address or "local", os.getpid())
    log.info("embinit service: %s", roots_line(settings.data_roots, settings.pretrained_roots))
    return app
