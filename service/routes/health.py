"""Liveness: the service answers, its database answers, and which Ray it uses.

`/health` never waits on MLflow nor on the threads that serve the other routes: it runs on the event
loop and checks the database in a thread of its own, for at most `DB_CHECK_S` seconds, so a slow
tracking server (whose readers fill the shared worker threads) leaves it answering.
"""

from __future__ import annotations

import asyncio
import threading

from fastapi import APIRouter, Request
from sqlalchemy import text

import embinit
from service.schemas import Health

router = APIRouter(tags=["health"])
DB_CHECK_S = 5.0


def _ping(sessions, loop: asyncio.AbstractEventLoop, done: asyncio.Future) -> None:
    def answer(error: Exception | None) -> None:
        if not done.done():
            done.set_exception(error) if error else done.set_result(None)
    try:
        with sessions() as session:
            session.execute(text("SELECT 1"))
        error = None
    except Exception as e:  # handed to the route
        error = e
    try:
        loop.call_soon_threadsafe(answer, error)
    except RuntimeError:  # the loop is gone (the server stopped meanwhile): nobody waits
        pass


@router.get("/health", response_model=Health)
async def health(request: Request) -> Health:
    """Whether the API and its state database answer (never needs a token)."""
    state = request.app.state
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    # A daemon thread of its own: a hung database never holds up the process's exit.
    threading.Thread(target=_ping, args=(state.sessions, loop, done), daemon=True, name="embinit-health").start()
    try:
        await asyncio.wait_for(done, timeout=DB_CHECK_S)
        database = "ok"
    except TimeoutError:
        database = f"error: no answer within {DB_CHECK_S:g} s"
    except Exception as e:  # reported, not raised
        database = f"error: {type(e).__name__}"
    ray = getattr(state.runner, "describe", lambda: type(state.runner).__name__)()
    return Health(status="ok" if database == "ok" else "degraded", version=embinit.__version__,
                  database=database, ray=ray)
