"""Liveness: the service answers, its database answers, and which Ray it uses."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

import embinit
from service.deps import RunnerDep, SessionDep
from service.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health)
def health(session: SessionDep, runner: RunnerDep) -> Health:
    """Whether the API and its state database answer (never needs a token)."""
    try:
        session.execute(text("SELECT 1"))
        database = "ok"
    except Exception as e:  # reported, not raised
        database = f"error: {type(e).__name__}"
    ray = getattr(runner, "describe", lambda: type(runner).__name__)()
    return Health(status="ok" if database == "ok" else "degraded", version=embinit.__version__,
                  database=database, ray=ray)
