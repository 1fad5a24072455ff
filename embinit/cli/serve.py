"""`embinit serve`: the HTTP API on embedded defaults (a local Ray, a SQLite state database and the
`sqlite:///mlflow.db` MLflow store with artifacts beside it), or on what `EMBINIT_*` variables say."""

from __future__ import annotations

import os

from embinit.cli.arg_types import port
from embinit.commands import ui_command
from embinit.redact import masked


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="run the HTTP API (experiments over HTTP; docs at /docs)")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8000, help="port (default 8000)")
    p.add_argument("--ray-address", default=None,
                   help="an existing Ray cluster (ray://HEAD:10001, or HOST:6379 on a cluster node); "
                        "default: EMBINIT_RAY_ADDRESS, else a local Ray started with the API")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=run)


def _settings():
    """The service's settings from the environment, or one EmbinitError listing each EMBINIT_* value they
    refuse: a list that is not JSON (EMBINIT_DATA_ROOTS=/data) was pydantic-settings' SettingsError, a
    traceback that hid the other values' problems."""
    import re

    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from embinit.errors import EmbinitError
    from service.settings import Settings

    problems, set_aside = [], {}
    try:
        while True:
            try:
                settings = Settings()
                break
            except SettingsError as e:   # a value read as JSON (a list) that is not: set it aside, read on
                name = "EMBINIT_" + (re.search(r'field "(\w+)"', str(e)) or ["", "?"])[1].upper()
                if name not in os.environ:   # from a .env file: said as pydantic-settings says it
                    raise EmbinitError(f"invalid EMBINIT_* setting: {e}") from None
                problems.append(f"{name}: not JSON (a list is written as JSON, e.g. {name}='[\"/data\"]'), got "
                                f"{os.environ[name]!r}")
                set_aside[name] = os.environ.pop(name)
            except ValidationError as e:
                problems += [f"EMBINIT_{'_'.join(map(str, err['loc'])).upper()}: {err['msg']}, got "
                             f"{err.get('input')!r}" for err in e.errors()]
                break
    finally:
        os.environ.update(set_aside)
    if problems:
        raise EmbinitError(f"invalid EMBINIT_* setting: {'; '.join(problems)}")
    return settings


def run(args) -> int:
    import uvicorn

    from embinit.errors import EmbinitError
    from embinit.tracking.mlflow_store import telemetry_off
    from service.main import create_app
    from service.serving import port_taken, uvicorn_options

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    telemetry_off()
    settings = _settings()
    if args.ray_address:
        settings.ray_address = args.ray_address
    if settings.ray_address is None:
        # Only for the local Ray, which listens on the loopback alone (embinit.sweep.ray_runtime); on a
        # cluster Ray's token auth stays as the cluster set it (docs/deployment.md).
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")   # a local Ray with token auth refuses drivers
    if settings.mlflow_ui_url is None and not settings.tracking_uri.startswith(("http://", "https://")):
        settings.mlflow_ui_url = "http://127.0.0.1:5000"  # where the printed `mlflow ui` command serves
    app = create_app(settings)
    # A second API on this state database (another `embinit serve` in this folder), or the port taken, is
    # refused here in one line (`embinit: error: ...`, exit 2), before anything starts: refused in the app's
    # startup, uvicorn printed its traceback. The startup finds the lease held (service.main).
    app.state.lease.acquire()
    try:
        taken = port_taken(args.host, args.port)
        if taken:
            raise EmbinitError(taken)
        _banner(args, settings)
        if settings.ray_address is not None:
            # a cluster the API cannot join is refused here in one line too, naming the likely fixes
            # (service.runner.unreachable), not in the startup's traceback
            app.state.runner.connect()
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, **uvicorn_options(settings))
    finally:
        app.state.lease.release()
    return 0


def _banner(args, settings) -> None:
    from service.paths import roots_line
    if args.host in ("0.0.0.0", "::"):   # every interface: no address a client could open as printed
        import socket
        base = f"http://{socket.gethostname()}:{args.port}"
        print(f"embinit API on every interface ({args.host}), port {args.port}: e.g. {base}  (docs: {base}/docs)",
              flush=True)
    else:
        base = f"http://{args.host}:{args.port}"
        print(f"embinit API on {base}  (docs: {base}/docs)", flush=True)
    # passwords masked: the banner lands in terminals and logs (the UI command reads it from the service's
    # own $EMBINIT_TRACKING_URI, embinit.commands)
    print(f"state database: {masked(settings.database_url)}   MLflow store: {masked(settings.tracking_uri)}",
          flush=True)
    print(f"Ray: {settings.ray_address or 'local (started with the API, stopped with it)'}", flush=True)
    # what an operator checks a lab setup by: whether checkpoints outlive a node, and who may submit
    from embinit.storage import STORAGE_ENV, configured
    store = configured()
    print(f"object store: {store} ({STORAGE_ENV})" if store else
          f"object store: none ({STORAGE_ENV} unset: trial checkpoints stay on each node's disk)", flush=True)
    guarded = "POST, DELETE and GET" if settings.reads_require_token else "POST and DELETE"
    print(f"API token: required on {guarded}" if settings.api_token else
          "API token: none (EMBINIT_API_TOKEN unset: whoever reaches the port may submit and cancel)", flush=True)
    # where a spec's files must lie: relative defaults are this working directory's (docs/deployment.md)
    print(roots_line(settings.data_roots, settings.pretrained_roots), flush=True)
    print(f"MLflow UI: {ui_command(settings.tracking_uri)}", flush=True)
