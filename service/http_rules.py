"""HTTP rules every route keeps: a 405 names every method its path allows (`Allow`, RFC 9110 15.5.6),
a 422 raised as an `HTTPException` has the one shape of `service.problems` whatever its detail, and a
query parameter given more than once, or one the route does not take (`?rerun` misspelled), is a 422
instead of silently taking the last value or being ignored."""

from __future__ import annotations

import functools
import re

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from embinit.errors import did_you_mean
from service.problems import as_problems, respond

METHODS = {"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"}


@functools.lru_cache(maxsize=256)
def _pattern(template: str) -> re.Pattern:
    """The regular expression of an OpenAPI path template (`/experiments/{exp_id}`), compiled once: the
    unknown-query check matches every `/experiments` request's path against the schema's templates."""
    return re.compile("".join("[^/]+" if part.startswith("{") else re.escape(part)
                              for part in re.split(r"(\{[^/}]+\})", template)))


def _operations(app: FastAPI, path: str) -> dict:
    """{method: its OpenAPI operation} the schema documents at `path`; empty for a path it does not."""
    for template, ops in app.openapi().get("paths", {}).items():
        if _pattern(template).fullmatch(path):
            return ops
    return {}


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method the OpenAPI schema documents at `path` (Starlette names only the first route's);
    empty for a path the schema does not document."""
    return sorted(m.upper() for m in _operations(app, path) if m.upper() in METHODS)


def install_http_rules(app: FastAPI) -> None:
    """405 answers carry `Allow` with all of the path's methods; 422 answers list problems."""
    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 422:
            return respond(as_problems(exc.detail), request, exc.headers)
        if exc.status_code == 405:
            documented = allowed_methods(request.app, request.url.path)
            headers = {**(exc.headers or {}), **({"Allow": ", ".join(documented)} if documented else {})}
            exc = StarletteHTTPException(405, detail=exc.detail, headers=headers)
        return await http_exception_handler(request, exc)


async def single_query_values(request: Request) -> None:
    """Refuse `?limit=5&limit=6`: which one the client meant is unknowable."""
    repeated = sorted({k for k, _ in request.query_params.multi_items()
                       if len(request.query_params.getlist(k)) > 1})
    if repeated:
        raise RequestValidationError([
            {"type": "repeated_query_parameter", "loc": ("query", name),
             "msg": f"query parameter {name!r} is given {len(values)} times ({', '.join(map(repr, values))}); "
                    f"give it once", "input": values}
            for name, values in ((name, request.query_params.getlist(name)) for name in repeated)])


async def known_query_names(request: Request) -> None:
    """Refuse a query parameter the route does not take (`?retry=true` for `?rerun=true`, `?stauts=`): it
    would be ignored, and the answer be another than the one asked for."""
    operation = _operations(request.app, request.url.path).get(request.method.lower())
    if operation is None:
        return
    names = sorted(p["name"] for p in operation.get("parameters", []) if p.get("in") == "query")
    unknown = sorted(set(request.query_params) - set(names))
    if unknown:
        takes = f"this route takes {', '.join(map(repr, names))}" if names else "this route takes none"
        raise RequestValidationError([
            {"type": "unknown_query_parameter", "loc": ("query", name),
             "msg": f"unknown query parameter {name!r}; {takes}{did_you_mean(name, names)}", "input": None}
            for name in unknown])
