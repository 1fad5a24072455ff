"""The one shape of every 422 the API answers: `{"detail": [{"loc": "<where>", "msg": "<what>"}, ...]}`.

`loc` is always a string:
- a field of the submitted spec, named as the spec's own problems name it (`embinit.spec.problems`):
  `name`, `tasks[0].task`, `inits[2].transform`, `search.space.lr[1]`; a problem of some planned
  trials that lies in one field at the place that sets it (`tasks[0].d_model`), else at the trials
  (`trials sst2 x GloVe`: settings no trial may combine);
- a parameter of the request, prefixed with where it was sent: `query.limit`, `path.exp_id`,
  `header.<name>`;
- `""` for the request as a whole: a body that does not parse, a spec that expands into too many
  trials, a request nested too deeply, and the closing notes (how many more problems there were, what
  was not checked because of the problems listed).
Every problem found is listed, at most `Settings.max_problems` of them, then one saying how many more.

Every other 4xx (400, 401, 404, 405, 408, 409, 413, 415, 429) and 503 answers one message,
`{"detail": "<string>"}`: it says one thing about the whole request, not a list of fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from embinit.errors import EmbinitError
from embinit.redact import scrubbed
from embinit.spec import SpecError
from embinit.spec.path_fields import format_loc

MAX_PROBLEMS = 50  # the default of Settings.max_problems
PARAMETER_PLACES = ("query", "path", "header", "cookie")


def problems_detail(problems: Sequence[tuple[str, str]], limit: int = MAX_PROBLEMS,
                    notes: Iterable[str] = ()) -> list[dict[str, str]]:
    """At most `limit` problems, then one saying how many more there were (a spec of 20,000 bad
    entries must not answer with megabytes), then `notes` (what was not checked because of them)."""
    shown = [{"loc": loc, "msg": msg} for loc, msg in problems[:limit]]
    if len(problems) > limit:
        shown.append({"loc": "", "msg": f"... and {len(problems) - limit} more problems (only the first "
                                        f"{limit} are listed)"})
    return shown + [{"loc": "", "msg": note} for note in notes]


def unprocessable(problems: Sequence[tuple[str, str]], limit: int = MAX_PROBLEMS, notes: Iterable[str] = ()
                  ) -> HTTPException:
    """The 422 listing `problems` (at most `limit`), then `notes`."""
    return HTTPException(422, detail=problems_detail(problems, limit, notes))


def parameter_loc(loc: Sequence[str | int]) -> str:
    """A request validation error's location as a string: `("query", "limit")` -> `query.limit`, a body
    field as the spec names it (`("body", "tasks", 0, "task")` -> `tasks[0].task`), the body itself `""`."""
    if loc and loc[0] in PARAMETER_PLACES:
        return ".".join(str(part) for part in loc)
    loc = tuple(loc)
    return format_loc(loc[1:] if loc[:1] == ("body",) else loc)


def request_problems(errors: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """(loc, msg) of each of FastAPI's request validation errors; the message names the value sent, as
    the spec's messages do (`Input should be a valid integer ..., got 'abc'`)."""
    out = []
    for e in errors:
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        if e.get("type") != "value_error" and isinstance(e.get("input"), (str, int, float)):
            msg += f", got {e['input']!r}"
        out.append((parameter_loc(e.get("loc", ())), msg))
    return list(dict.fromkeys(out))


def _limit(request: Request) -> int:
    return request.app.state.settings.max_problems


def respond(detail: list[dict[str, str]], request: Request, headers: dict[str, str] | None = None
            ) -> JSONResponse:
    """Every 422 the API sends, its problems in the one shape: a message may quote a store's URL (a
    library's, a driver's, a route's), whose password never reaches a client."""
    settings = getattr(request.app.state, "settings", None)
    secrets = settings.secret_uris() if settings is not None else []
    shown = [{"loc": p["loc"], "msg": scrubbed(p["msg"], secrets)} for p in detail]
    return JSONResponse(status_code=422, content={"detail": shown}, headers=headers)


def _answer(problems: Sequence[tuple[str, str]], request: Request, notes: Iterable[str] = ()) -> JSONResponse:
    return respond(problems_detail(problems, _limit(request), notes), request)


def install_problem_handlers(app: FastAPI) -> None:
    """Every exception that becomes a 422 answers the one shape (an `HTTPException(422)` is shaped by
    `service.http_rules`, which handles every HTTPException)."""

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError):
        return _answer(request_problems(exc.errors()), request)

    @app.exception_handler(SpecError)
    async def _spec_error(request: Request, exc: SpecError):
        return _answer(exc.problems, request, exc.notes)

    @app.exception_handler(EmbinitError)
    async def _user_error(request: Request, exc: EmbinitError):
        return _answer([("", str(exc))], request)

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, _exc: RecursionError):
        return _answer([("", "the request is nested too deeply")], request)


def as_problems(detail: Any) -> list[dict[str, str]]:
    """An `HTTPException(422)`'s detail in the one shape: a list of problems as it is, anything else
    (a string some route raised) one problem of the whole request."""
    if isinstance(detail, list) and all(isinstance(p, dict) and set(p) == {"loc", "msg"} for p in detail):
        return detail
    return [{"loc": "", "msg": str(detail)}]
