"""Stops a local Ray's leftover processes as soon as the API that started it is gone, however it went.

Ray ties its GCS and raylet to the API process, but the raylet's agents (`ray::DashboardAgent`,
`ray::RuntimeEnvAgent`) outlived a killed API by a minute. So before its local Ray starts the API starts
this small process, which blocks on a pipe whose write end only the API holds. The end of the pipe (the
API exited, was killed or crashed) makes it kill every process the API started:
- each process whose environment carries the API's mark (`EMBINIT_API_PROCESS=<pid>:<start time>`, set in
  the API's own environment before Ray starts, so every Ray process inherits it, however it was started
  and whoever its parent is now: the agents' raylet dies with the API and leaves them to init);
- and, for a process that dropped its environment, the API's descendants as last noted (every second).
Both name a process by pid and start time, so a reused pid is never mistaken. Linux only (`/proc`);
elsewhere nothing is started.

    python -m service.ray_reaper API_PID:START_TIME      # stdin: the pipe
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

MARK = "EMBINIT_API_PROCESS"
_keep: list[int] = []   # the write end of each reaper's pipe, held (never inherited) until the process ends


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[19]


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def descendants(root: int) -> dict[int, str]:
    """pid -> start time of every live descendant of `root`."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for pid in _pids():
        if (st := _stat(pid)) is not None:
            children.setdefault(st[0], []).append(pid)
            started[pid] = st[1]
    out, stack = {}, [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out[child] = started[child]
            stack.append(child)
    return out


def marked(token: str) -> dict[int, str]:
    """pid -> start time of every live process whose environment has `MARK=token`."""
    entry, out = f"{MARK}={token}".encode(), {}
    for pid in _pids():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:   # gone, or not ours to read
            continue
        if entry in env and (st := _stat(pid)) is not None:
            out[pid] = st[1]
    return out


def start() -> subprocess.Popen | None:
    """Start the reaper of this process's local Ray, before Ray starts: this marks the process's
    environment, which every process it starts from now on inherits. None where there is no /proc."""
    st = _stat(os.getpid())
    if st is None:
        return None
    token = f"{os.getpid()}:{st[1]}"
    os.environ[MARK] = token
    read_end, write_end = os.pipe()  # neither is inherited by processes started later (PEP 446)
    proc = subprocess.Popen([sys.executable, "-m", "service.ray_reaper", token], stdin=read_end,
                            start_new_session=True)  # a Ctrl-C of the API's terminal does not stop it first
    os.close(read_end)
    _keep.append(write_end)
    return proc


def _kill(victims: dict[int, str]) -> None:
    for pid, started in victims.items():
        st = _stat(pid)
        if st is not None and st[1] == started:  # the same process, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # gone meanwhile
                pass


def main(token: str) -> None:
    me, api_pid, known = os.getpid(), int(token.split(":")[0]), {}
    while True:
        readable, _, _ = select.select([0], [], [], 1.0)
        if readable and not os.read(0, 4096):  # the end of the pipe: the API process is gone
            break
        known = descendants(api_pid)
    _kill({p: t for p, t in known.items() if p != me})
    for _ in range(3):   # again for any started while the first ones went
        if not (left := {p: t for p, t in marked(token).items() if p != me}):
            break
        _kill(left)


if __name__ == "__main__":
    main(sys.argv[1])
