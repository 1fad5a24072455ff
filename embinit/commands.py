"""Commands as embinit prints them, so that they run as printed (issue 22 item 8).

After `make run`, `embinit` and `mlflow` live in `.venv/bin` only, not on PATH. A printed command names
a program by the shortest form that runs from the current folder: the bare name when PATH finds this
interpreter's copy of it, else its path in the running interpreter's scripts folder (relative to the
current folder when inside it: `.venv/bin/embinit`).

A URI holding a password (`postgresql://user:PASSWORD@host/db`) is never printed: printed, it would stay
in the terminal, in logs and in the shell's history. The command takes it from an environment variable
instead (`--tracking-uri "${EMBINIT_TRACKING_URI:?...}"`, `FromEnv`), which the shell expands, and refuses
to run while it is unset, rather than run on another store; `env_note` says what to set it to (the URI
with its password masked).
"""

from __future__ import annotations

import shlex
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from embinit.redact import has_secret, masked

UI_PORT = 5000   # the port the printed `mlflow ui` commands serve on
# The variable a printed command reads a tracking URI with a password from; the service's setting of its
# store has the same name, so under `embinit serve` it is set already.
TRACKING_URI_ENV = "EMBINIT_TRACKING_URI"
UNSET = "set it to the URI with its password"   # the shell's message (no URI in it: nothing to quote)


@dataclass(frozen=True)
class FromEnv:
    """An argument a printed command takes from the environment variable `name` when it runs: `uri` is
    what the variable should hold (shown masked by `env_note`)."""

    name: str
    uri: str

    def __str__(self) -> str:   # the shell refuses the command, naming the variable, while it is unset
        return f'"${{{self.name}:?{UNSET}}}"'


def uri_arg(uri: str, env: str = TRACKING_URI_ENV) -> str | FromEnv:
    """`uri` as a printed command names it: as is, or from `$env` when it holds a password."""
    return FromEnv(env, uri) if has_secret(uri) else uri


def env_note(*args: object) -> str | None:
    """What to set before running a command printed with `args` (None when it needs nothing)."""
    needed = {a.name: masked(a.uri) for a in args if isinstance(a, FromEnv)}
    if not needed:
        return None
    return "set " + " and ".join(f"${name} to {uri}" for name, uri in needed.items()) + \
        ", with the password (not printed), first"


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


def command(name: str, *args: str | FromEnv) -> str:
    return " ".join([shlex.quote(program(name)), *(str(a) if isinstance(a, FromEnv) else shlex.quote(str(a))
                                                   for a in args)])


def runs_page(base: str, experiment_id: str | None) -> str:
    """The MLflow UI's run table of an experiment (`base` alone without one). MLflow 3's UI opens an
    experiment (its link, or a click in the list) on the GenAI overview (traces, token usage) whatever
    its `mlflow.experimentKind`; the `/runs` route is the run table in MLflow 2 and 3 alike."""
    base = base.rstrip("/")
    return f"{base}/#/experiments/{experiment_id}/runs" if experiment_id else base


def ui_command(tracking_uri: str, port: int = UI_PORT, experiment_id: str | None = None) -> str:
    """How to look at a tracking store: a server's URL as is, else the `mlflow ui` command on `port`;
    with `experiment_id`, the address of that experiment's run table."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {runs_page(masked(tracking_uri), experiment_id)} (the MLflow server)"
    return f"{command('mlflow', 'ui', '--backend-store-uri', uri_arg(tracking_uri), '--port', str(port))}" \
           f"   # then open {runs_page(f'http://127.0.0.1:{port}', experiment_id)}"


def next_steps(experiment: str, tracking_uri: str, plot_dir: str = "plots/",
               experiment_id: str | None = None) -> list[str]:
    """What to run after a sweep: its report with plots, and the MLflow UI (at the experiment's run
    table, given its id). Both name the store by its absolute URI, so they run as printed from any
    directory (not only the one the sweep ran in); a URI with a password by `$EMBINIT_TRACKING_URI`, and a
    last line says so."""
    report = ["report", experiment, "--plot", plot_dir, "--tracking-uri", uri_arg(tracking_uri)]
    note = env_note(*report)
    ui = ui_command(tracking_uri, experiment_id=experiment_id)
    return ["next steps:", f"  {command('embinit', *report)}", f"  {ui}",
            *([f"  # {note}"] if note else [])]


