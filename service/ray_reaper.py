"""Stops a local Ray's leftover processes as soon as the API that started it is gone, however it went.

Ray ties its GCS and raylet to the API process, but the raylet's agents (`ray::DashboardAgent`,
`ray::RuntimeEnvAgent`) outlived a killed API by a minute. So once its local Ray is up the API starts
this small process: it notes the API's descendants every second (pid and start time, so a reused pid is
never mistaken), and blocks on a pipe whose write end only the API holds. The end of the pipe (the API
exited, was killed or crashed) makes it kill every descendant of its last note still alive. Linux only
(`/proc`); elsewhere nothing is started.

    python -m service.ray_reaper API_PID      # stdin: the pipe
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

_keep: list[int] = []   # the write end of each reaper's pipe, held (never inherited) until the process ends


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[19]


def descendants(root: int) -> dict[int, str]:
    """pid -> start time of every live descendant of `root`."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            children.setdefault(st[0], []).append(int(entry.name))
            started[int(entry.name)] = st[1]
    out, stack = {}, [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out[child] = started[child]
            stack.append(child)
    return out


def start() -> subprocess.Popen | None:
    """Start the reaper of this process's local Ray; None where there is no /proc."""
    if not Path("/proc/self/stat").exists():
        return None
    read_end, write_end = os.pipe()  # neither is inherited by processes started later (PEP 446)
    proc = subprocess.Popen([sys.executable, "-m", "service.ray_reaper", str(os.getpid())], stdin=read_end,
                            start_new_session=True)  # a Ctrl-C of the API's terminal does not stop it first
    os.close(read_end)
    _keep.append(write_end)
    return proc


def main(api_pid: int) -> None:
    me, known = os.getpid(), {}
    while True:
        readable, _, _ = select.select([0], [], [], 1.0)
        if readable and not os.read(0, 4096):  # the end of the pipe: the API process is gone
            break
        known = {p: t for p, t in descendants(api_pid).items() if p != me}
    for pid, started in known.items():
        st = _stat(pid)
        if st is not None and st[1] == started:  # the same process, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # gone meanwhile
                pass


if __name__ == "__main__":
    main(int(sys.argv[1]))
