"""A tracking server that makes every request wait: the check a sweep runs once against an `http(s)://`
tracking URI, and the warning it logs.

`mlflow server --workers N` with N > 1 (MLflow's default is 4) serves through uvicorn's multi-process mode,
whose accepted sockets leave Nagle's algorithm on (Kludex/uvicorn#3149): every request on a kept-alive
connection after the first waits ~40 ms for the client's delayed ACK. Each trial pays it on each of its
requests (five, plus one when training starts and one per epoch), and every logging call of an analysis
callback stalls its training step for it. The first request of a connection does not wait, which tells this
apart from a server that is only slow or far away: there the first request, which also opens the
connection, is the slowest.
"""

from __future__ import annotations

import logging
import time

from embinit.errors import EmbinitError
from embinit.redact import masked

log = logging.getLogger("embinit.tracking")

SLOW_MS = 25.0   # kept-alive requests to a local or nearby server take 1-10 ms; the stall adds ~40


def keepalive_warning(uri: str, first_ms: float, later_ms: list[float]) -> str | None:
    """The warning for a server whose requests on a kept-alive connection (`later_ms`, each one) all take
    SLOW_MS or more while the connection's first took at most half the fastest of them; else None."""
    if not later_ms or min(later_ms) < SLOW_MS or first_ms > min(later_ms) / 2:
        return None
    return (f"every request to the MLflow server {masked(uri)} on a kept-alive connection waits: "
            f"{min(later_ms):.0f}-{max(later_ms):.0f} ms each, against {first_ms:.0f} ms for the connection's "
            "first. That is a server started with `--workers` above 1 (MLflow's default is 4): uvicorn's "
            "multi-process mode leaves Nagle's algorithm on (Kludex/uvicorn#3149), and each request of every "
            "trial waits ~40 ms for it. Start the server with `--workers 1` (run more one-worker replicas to "
            "scale it; docs/deployment.md)")


def check(uri: str, requests_made: int = 4, timeout_s: float = 5.0, patience_s: float = 10.0) -> str | None:
    """Time `requests_made` requests of the server's `/health` on one connection and log the warning
    when there is one (returned too). A server that cannot be reached (refused, no such host, no answer in
    `timeout_s`), tried again for `patience_s` (a server restarting while an experiment starts), is an
    EmbinitError: MLflow's own client retries such a server for minutes, in silence, before the sweep's
    first call fails. A server that answers with an error gives no warning here."""
    if not uri.startswith(("http://", "https://")):
        return None
    import requests

    deadline = time.monotonic() + patience_s
    while True:
        times = []
        try:
            with requests.Session() as session:
                for _ in range(requests_made):
                    t = time.perf_counter()
                    session.get(uri.rstrip("/") + "/health", timeout=timeout_s).raise_for_status()
                    times.append(1000 * (time.perf_counter() - t))
            break
        except (requests.ConnectionError, requests.Timeout) as e:
            if time.monotonic() < deadline:
                time.sleep(1.0)
                continue
            why = _why(e, timeout_s)
            raise EmbinitError(f"the MLflow server {masked(uri)} cannot be reached ({why}, tried for "
                               f"{patience_s:g} s); start it (e.g. `mlflow server --backend-store-uri "
                               f"sqlite:///mlflow.db --workers 1`) or give the URI of one that runs (--tracking-uri, "
                               f"the spec's mlflow.tracking_uri)") from None
        except requests.RequestException:
            return None
    message = keepalive_warning(uri, times[0], times[1:])
    if message:
        log.warning(message)
    return message


def unreachable(uri: str, timeout_s: float = 3.0) -> str | None:
    """Why the tracking server at `uri` cannot be reached now (refused, no such host, no answer in
    `timeout_s`), one try of its `/health`; None when it answers (even with an error status)."""
    import requests
    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout_s)
    except (requests.ConnectionError, requests.Timeout) as e:
        return _why(e, timeout_s)
    except requests.RequestException:
        return None
    return None


def _why(e: Exception, timeout_s: float) -> str:
    """Why a request to the server failed to reach it: no answer in `timeout_s`, or the connection's reason."""
    import requests
    return f"no answer in {timeout_s:g} s" if isinstance(e, requests.Timeout) else _reason(e)


def _reason(e: Exception) -> str:
    """The innermost reason of a connection error, e.g. "[Errno 111] Connection refused"."""
    for _ in range(10):   # requests' error wraps urllib3's, which wraps the socket's
        inner = getattr(e, "reason", None) or e.__context__
        if not isinstance(inner, Exception):
            break
        e = inner
    return str(e).rsplit(": ", 1)[-1] if str(e) else type(e).__name__
