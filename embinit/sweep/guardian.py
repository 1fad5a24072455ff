"""What `embinit run`'s supervisor (embinit.cli.supervise) learns from the driver it started, and what it
does when that driver ends without closing its sweep.

`embinit run` runs its sweep in a child process, the driver, in a process group of its own, so that its
local Ray (the GCS, the raylet, which share the driver's group) is out of reach of a signal to the
command's group; the command's own process, the supervisor, passes each signal on to the driver alone.
But a signal may still reach every process of a job (Slurm's scancel and time limit, `systemctl stop`,
the OOM killer), and then Ray's core worker in the driver ends the process (exit 1: "The connection to
the plasma store is failed. Terminate the process.") within ~60 ms of its raylet's death, sometimes
before the driver has closed anything, embinit.sweep.abandon's watcher included. The supervisor outlives
it: the driver tells it, over a pipe, which sweep runs it holds open (`opened`) and when it has closed
them (`closed`); a sweep still open when the driver has ended is closed by the supervisor
(`close_left_open`), through MLflow alone, as interrupted by the signal that came, or, with none, by how
the driver ended. A sweep run that is no longer RUNNING (the driver or its watcher closed it first) is
left as it is.

The pipe's end is named to the driver by `GUARDIAN_ENV` ("FD:PID", the supervisor's pid), which `take`
reads once and removes, so that no process the driver starts (Ray's) inherits it.
"""

from __future__ import annotations

import json
import os

from embinit.sweep.exits import how_ended
from embinit.sweep.interrupt import interrupted_reason

GUARDIAN_ENV = "EMBINIT_GUARDIAN"
_fd: int | None = None


def take() -> None:
    """In the driver, at its start: take the pipe to the supervisor from `GUARDIAN_ENV` when this process
    is the supervisor's child (a process that merely inherited the variable is not)."""
    global _fd
    value = os.environ.pop(GUARDIAN_ENV, None)
    if not value:
        return
    try:
        fd, parent = (int(x) for x in value.split(":"))
    except ValueError:
        return
    if os.getppid() == parent:
        try:
            os.set_blocking(fd, False)   # a supervisor that stopped reading must never stall the sweep
        except OSError:
            return
        _fd = fd


def tell(message: dict) -> None:
    """Say `message` to the supervisor (a JSON line), if there is one; a supervisor gone is no error."""
    if _fd is None:
        return
    try:
        os.write(_fd, (json.dumps(message) + "\n").encode())
    except OSError:
        pass


def opened(exp_id: str, uri: str, runs_uri: str, parent: str) -> None:
    """The driver opened sweep run `parent` of experiment `exp_id` (its trial runs in `runs_uri`)."""
    tell({"opened": {"exp_id": exp_id, "uri": uri, "runs_uri": runs_uri, "parent": parent}})


def closed(parent: str) -> None:
    tell({"closed": parent})


SAID_INTERRUPTED = {"said": "interrupted"}


def said_interrupted() -> None:
    """The driver said that it was interrupted (embinit.cli.run): the supervisor does not say it again."""
    tell(SAID_INTERRUPTED)


def has_said_interrupted(lines: list[str]) -> bool:
    """Whether the driver's messages (`lines`, as read) include `said_interrupted`'s."""
    return json.dumps(SAID_INTERRUPTED) in lines


def left_open(lines: list[str]) -> list[dict]:
    """The sweeps the driver's messages (`lines`, as read) opened and did not close, in order."""
    sweeps: dict[str, dict] = {}
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError:   # a line cut short by the driver's end
            continue
        if "opened" in message:
            sweeps[message["opened"]["parent"]] = message["opened"]
        elif "closed" in message:
            sweeps.pop(message["closed"], None)
    return list(sweeps.values())


def close_left_open(sweeps: list[dict], how: str | None, returncode: int) -> int:
    """Close each of `sweeps` (`left_open`'s) whose run is still RUNNING, with its trial runs still
    RUNNING: interrupted by the signal `how`, or, when none came, interrupted by the driver's end (its
    checkpoints are kept: running the spec again resumes). Returns how many were closed."""
    from embinit.tracking import run_writers
    from embinit.tracking.mlflow_store import client
    from embinit.tracking.records import INTERRUPTED, RERUN_RESUMES
    if how is not None:
        reason = interrupted_reason(how)
    else:
        reason = (f"interrupted (the sweep's driver ended without closing its runs: {how_ended(returncode)}); "
                  f"{RERUN_RESUMES}")
    n = 0
    for sweep in sweeps:
        if client(sweep["uri"]).get_run(sweep["parent"]).info.status != "RUNNING":
            continue   # closed by the driver (or its watcher) after all
        run_writers.close_orphans(sweep["exp_id"], sweep["runs_uri"], sweep["parent"], reason, *INTERRUPTED)
        run_writers.close_sweep_run(sweep["parent"], sweep["uri"], reason, *INTERRUPTED)
        n += 1
    return n
