"""How `embinit serve` runs uvicorn: with limits, so clients that connect and then stall cannot hold
connections open forever.

uvicorn times out an idle keep-alive connection (`timeout_keep_alive`) but not a request whose headers
never finish arriving: a connection that sends half a request line and waits stayed open indefinitely.
`HeaderTimeoutH11Protocol` closes a connection whose request headers are not complete within
`header_timeout_s` of its first byte (or of the connection, for a client that sends nothing). The body's
own deadline is `Settings.body_timeout_s` (408, in the route). `limit_concurrency` answers 503 once that
many connections or requests are open, rather than letting them pile up.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.settings import Settings


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers."""

    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._watch_headers(started=True)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_headers(started=bool(data))

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _watch_headers(self, started: bool) -> None:
        """Armed while a request has begun (or the connection is new) and its headers are incomplete:
        h11 keeps the peer IDLE until the whole head has arrived."""
        waiting = self.conn.their_state is h11.IDLE and started
        if waiting and self._header_timer is None and not self.transport.is_closing():
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)
        elif not waiting:
            self._cancel_header_timer()

    def _cancel_header_timer(self) -> None:
        if getattr(self, "_header_timer", None) is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.logger.info("closing a connection whose request headers did not arrive within %.1f s",
                             self.header_timeout_s)
            self.transport.close()


def protocol(header_timeout_s: float) -> type[HeaderTimeoutH11Protocol]:
    """The protocol class with this deadline (uvicorn builds one instance per connection)."""
    return type("HeaderTimeoutH11Protocol", (HeaderTimeoutH11Protocol,), {"header_timeout_s": header_timeout_s})


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for `uvicorn.run` / `uvicorn.Config` from the service's settings."""
    return {"http": protocol(settings.header_timeout_s), "timeout_keep_alive": settings.keep_alive_s,
            "limit_concurrency": settings.max_connections}


def port_taken(host: str, port: int) -> str | None:
    """Why `embinit serve` cannot listen on `host:port` because something already does, naming what (the
    process, when this user may see it), said before the API starts anything; None when the port is free
    (any other failure to listen is left to uvicorn, which says it). A moment later another process may
    take it: uvicorn's own error is then the answer."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn binds: TIME_WAIT is no user
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                return None
            by = _listener(port)
            return f"port {port} on {host} is already in use{f' by {by}' if by else ''}; stop it or choose " \
                   f"another --port"
    return None


def _listener(port: int) -> str | None:
    """`pid N (command line)` of the process listening on `port`, if this user may see it."""
    import psutil

    try:
        pids = {c.pid for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
        if not pids:
            return None
        proc = psutil.Process(min(pids))
        argv = proc.cmdline() or [proc.name()]
    except (psutil.Error, OSError):
        return None
    command = " ".join(" ".join([os.path.basename(argv[0]), *argv[1:]]).split())   # one line
    return f"pid {proc.pid} ({command[:100]}{'...' if len(command) > 100 else ''})"
