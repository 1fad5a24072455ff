"""Whether a sweep's driver still runs. A driver killed outright (SIGKILL, the OOM killer, a machine
lost) closes nothing: its sweep's run and its trials' runs stay RUNNING, and MLflow alone cannot tell
them from a sweep that trains. So a sweep's run records the process that drives it (`DRIVER_TAG`: host,
pid, the process's start time, the machine's boot id and PID namespace), and a reader on that machine,
in that PID namespace, can tell whether the process still runs (`alive`); elsewhere it cannot (None),
and nothing is said. So the driver also says it runs: `heartbeat` sets the sweep run's `HEARTBEAT_TAG`
to the time every `HEARTBEAT_S`, and a reader anywhere takes a driver silent for `SILENT_S` as gone (the
gap is wide, so the clocks of two machines need not agree closely, and a tracking server away for a few
minutes is not taken for a dead driver). `stale_trials`: the RUNNING trial runs whose sweep is known to be
gone, for the report and the dry run; `run_writers.close_dead_sweeps` closes such sweeps when the spec
runs again, on the driver's own machine only (where it is certain, not inferred from a silence).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

DRIVER_TAG = "embinit.driver"
HEARTBEAT_TAG = "embinit.driver_heartbeat"   # unix seconds, when the driver last said it runs
HEARTBEAT_S = 60.0
SILENT_S = 600.0
log = logging.getLogger("embinit.sweep")


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22): a pid reused by
    another process has another; None when no such process (or no /proc)."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rsplit(")", 1)[-1].split()   # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def _pid_namespace() -> str | None:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None


def current() -> str:
    """This process as a sweep's `DRIVER_TAG` value (JSON)."""
    pid = os.getpid()
    return json.dumps({"host": socket.gethostname(), "pid": pid, "start": _start_ticks(pid),
                       "boot": _read("/proc/sys/kernel/random/boot_id"), "pidns": _pid_namespace()})


def _parse(tag: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(tag) if tag else None
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("pid"), int) else None


def alive(tag: str | None) -> bool | None:
    """Whether the driver a `DRIVER_TAG` value names still runs: True or False where this process can
    tell (the same boot of the same machine, the same PID namespace), else None (no tag: a sweep of
    an older embinit; another machine or container; no /proc)."""
    d = _parse(tag)
    if d is None or d.get("start") is None or d.get("boot") is None:
        return None
    if d["boot"] != _read("/proc/sys/kernel/random/boot_id") or d.get("pidns") != _pid_namespace():
        return None
    return _start_ticks(d["pid"]) == d["start"]


def describe(tag: str | None) -> str:
    """`pid 4242 on host gpu-3`, or `an unrecorded process`."""
    d = _parse(tag)
    return f"pid {d['pid']} on host {d.get('host') or '?'}" if d else "an unrecorded process"


@contextmanager
def heartbeat(run_id: str, uri: str, every: float | None = None) -> Iterator[None]:
    """While inside, set the sweep run's `HEARTBEAT_TAG` to the time every `every` (`HEARTBEAT_S`)
    seconds, from a daemon thread; a write that fails (the store away for a while) is skipped."""
    from embinit.tracking.mlflow_store import client
    stop, tracking = threading.Event(), client(uri)

    def beat() -> None:
        while not stop.wait(every or HEARTBEAT_S):
            try:
                tracking.set_tag(run_id, HEARTBEAT_TAG, beat_value())
            except Exception as e:  # the next beat tries again; a reader waits SILENT_S
                log.debug("heartbeat of sweep run %s not written: %s", run_id, e)
    thread = threading.Thread(target=beat, daemon=True, name=f"embinit-heartbeat-{run_id[:8]}")
    thread.start()
    try:
        yield
    finally:
        stop.set()


def beat_value(now: float | None = None) -> str:
    return str(int(time.time() if now is None else now))


def silent_s(tags: dict[str, str], now: float | None = None) -> float | None:
    """Seconds since the driver last said it runs (None: no heartbeat recorded, an older sweep)."""
    try:
        return (time.time() if now is None else now) - float(tags[HEARTBEAT_TAG])
    except (KeyError, ValueError):
        return None


def _why_gone(sweep) -> str | None:
    """Why a sweep's driver is known to be gone, or None: its run ended, the process is gone (seen on its
    machine), or, where that cannot be seen, it has been silent for `SILENT_S`."""
    driver = sweep.tags.get(DRIVER_TAG)
    if sweep.status != "RUNNING":
        return f"its sweep's run {sweep.run_id} ended ({sweep.status}) without closing it"
    here = alive(driver)
    if here is False:
        return f"its sweep's driver ({describe(driver)}) is gone"
    quiet = silent_s(sweep.tags)
    if here is None and quiet is not None and quiet > SILENT_S:
        return (f"its sweep's driver ({describe(driver)}) has not been heard from for {quiet / 60:.0f} min (a "
                f"running driver says so every {HEARTBEAT_S:.0f} s)")
    return None


def stale_trials(exp_id: str, uri: str | None, trials: list) -> list[dict[str, Any]]:
    """Of `trials` (`TrialRecord`s), those RUNNING in MLflow whose sweep is known to be gone: its run
    ended, or its driver is no longer alive (`alive` is False). Each: run_id, label, seed, resume_epoch
    and why. Reads the sweep runs only when some trial is running."""
    running = [t for t in trials if t.status == "running"]
    if not running:
        return []
    from embinit.tracking.run_readers import sweep_records
    sweeps = {s.run_id: s for s in sweep_records(exp_id, uri)}
    out = []
    for t in running:
        sweep = sweeps.get(t.parent_id)
        why = _why_gone(sweep) if sweep is not None else None
        if why is None:
            continue
        out.append({"run_id": t.run_id, "key": t.key, "label": t.label, "seed": t.seed,
                    "resume_epoch": t.resume_epoch, "why": why})
    return out
