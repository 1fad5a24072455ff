"""Typed FastAPI dependencies: settings, the database session, the runner, the MLflow store, auth, and
the size-limited request body. The runner and store are chosen by `create_app` (tests pass fakes)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.requests import ClientDisconnect

from service.runner import Runner
from service.settings import Settings
from service.state import Reconciler
from service.store import ResultStore

log = logging.getLogger("embinit.service")
bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <EMBINIT_API_TOKEN>`")


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


async def get_runner(request: Request) -> Runner:
    return request.app.state.runner


async def get_store(request: Request) -> ResultStore:
    return request.app.state.store


async def get_reconciler(request: Request) -> Reconciler:
    return request.app.state.reconciler


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
RunnerDep = Annotated[Runner, Depends(get_runner)]
StoreDep = Annotated[ResultStore, Depends(get_store)]
ReconcilerDep = Annotated[Reconciler, Depends(get_reconciler)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _check_token(settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> None:
    if not settings.api_token:
        return
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(401, detail="missing bearer token: send 'Authorization: Bearer <token>'",
                            headers={"WWW-Authenticate": "Bearer"})
    if not secrets.compare_digest(credentials.credentials.encode(), settings.api_token.encode()):
        raise HTTPException(401, detail="invalid bearer token", headers={"WWW-Authenticate": "Bearer"})


# The auth dependencies read the settings from the app directly: they run on every request, and each
# sub-dependency costs FastAPI tens of microseconds.
async def require_write(request: Request, credentials: Credentials) -> None:
    """Writes need the token whenever one is configured."""
    _check_token(request.app.state.settings, credentials)


async def require_read(request: Request, credentials: Credentials) -> None:
    """Reads need the token only when `reads_require_token` is set."""
    settings = request.app.state.settings
    if settings.reads_require_token:
        _check_token(settings, credentials)


async def read_body(request: Request, settings: SettingsDep) -> bytes:
    """The request body, refused with 413 as soon as it exceeds `max_body_bytes` (declared or streamed)."""
    limit = settings.max_body_bytes
    too_big = HTTPException(413, detail=f"request body too large: the limit is {limit} bytes")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    try:
        async with asyncio.timeout(settings.body_timeout_s):  # a slow client must not hold a connection
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_big
                chunks.append(chunk)
    except TimeoutError:
        raise HTTPException(408, detail=f"the request body did not arrive within {settings.body_timeout_s} s",
                            headers={"Connection": "close"}) from None
    except ClientDisconnect:  # the client went away mid-upload: nobody reads an answer, nothing to log
        log.info("client disconnected while sending %s %s", request.method, request.url.path)
        raise HTTPException(400, detail="the client disconnected before sending the whole body") from None
    return b"".join(chunks)


BodyDep = Annotated[bytes, Depends(read_body)]
