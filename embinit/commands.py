"""Commands as embinit prints them, so that they run as printed (issue 22 item 8).

After `make run`, `embinit` and `mlflow` live in `.venv/bin` only, not on PATH. A printed command names
a program by the shortest form that runs from the current folder: the bare name when PATH finds this
interpreter's copy of it, else its path in the running interpreter's scripts folder (relative to the
current folder when inside it: `.venv/bin/embinit`).
"""

from __future__ import annotations

import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

UI_PORT = 5000   # the port the printed `mlflow ui` commands serve on


def scripts_dir() -> Path:
    """The running interpreter's scripts folder (`.venv/bin`), where pip put `embinit` and `mlflow`."""
    path = sysconfig.get_path("scripts")
    return Path(path) if path else Path(sys.executable).parent


def program(name: str) -> str:
    """`name`, or the path to run it by: the bare name only when PATH resolves it to this interpreter's own."""
    own = scripts_dir() / name
    if not own.exists():
        return name
    found = shutil.which(name)
    if found and Path(found).resolve() == own.resolve():
        return name
    cwd = Path.cwd()
    if cwd != Path(cwd.anchor) and own.absolute().is_relative_to(cwd):
        return str(own.absolute().relative_to(cwd))    # `.venv/bin/embinit`, as the README writes it
    return str(own.absolute())


def command(name: str, *args: str) -> str:
    return " ".join([shlex.quote(program(name)), *(shlex.quote(str(a)) for a in args)])


def ui_command(tracking_uri: str, port: int = UI_PORT) -> str:
    """How to look at a tracking store: a server's URL as is, else the `mlflow ui` command on `port`."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri} (the MLflow server)"
    return f"{command('mlflow', 'ui', '--backend-store-uri', tracking_uri, '--port', str(port))}" \
           f"   # then open http://127.0.0.1:{port}"


def next_steps(experiment: str, tracking_uri: str, plot_dir: str = "plots/") -> list[str]:
    """What to run after a sweep: its report with plots, and the MLflow UI. Both name the store by its
    absolute URI, so they run as printed from any directory (not only the one the sweep ran in)."""
    report = ["report", experiment, "--plot", plot_dir, "--tracking-uri", tracking_uri]
    return ["next steps:", f"  {command('embinit', *report)}", f"  {ui_command(tracking_uri)}"]


