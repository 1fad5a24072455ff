"""The local Ray dying under `embinit run` with no signal to the driver (the OOM killer takes the raylet or
the GCS, a Ray crash). Before: the driver waited on Ray until its core worker ended it (exit 1 after
Tune's "Trial task failed" traceback, ~13 s after the raylet's SIGKILL; 60 s, "Failed to connect to
GCS", after the GCS's), and the sweep's and the trial's runs stayed RUNNING. Now the driver closes them
FAILED, naming what died, says so and exits 1 at once; the trial's checkpoint is kept and a rerun
resumes it. The watcher (embinit.sweep.abandon) acts only while a sweep is open, and takes a loss after
SIGTERM or SIGHUP as that signal's interrupt."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from contextlib import nullcontext, suppress

import psutil
import pytest

from embinit.tracking import run_readers
from embinit.tracking.records import ERROR_TAG, STATUS_TAG
from embinit.sweep import abandon
from embinit.sweep.ray_runtime import local_ray_lost
from tests.helpers.embinit_run import assert_a_rerun_resumes, freeze_at_a_checkpoint, launch, runs, spec_file

RAYLET_DIED = "the local Ray's raylet died (pid 7, killed by SIGKILL)"
_NAMES = {"raylet": "raylet", "gcs_server": "GCS (gcs_server)"}   # a Ray process, as the error names it

pytestmark = pytest.mark.usefixtures("terminal_signals")   # the same under `nohup make test`


def _watched(monkeypatch, lost, sent: bytes = b"", open_sweep: bool = True) -> tuple[list, list]:
    """Run the watcher over a pipe holding the signal numbers `sent`, with `lost` as its check and (when
    `open_sweep`) a sweep's closer registered, until it ends the process or 1 s passes: (the calls to its
    `end`, the closer and the farewell, the exit codes asked for)."""
    calls, codes, ended = [], [], threading.Event()

    def exit_(code):   # instead of ending the process: the watcher goes on, and has tried
        codes.append(code)
        ended.set()
    monkeypatch.setattr(os, "_exit", exit_)
    monkeypatch.setattr(abandon, "say", lambda text: None)
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.write(write, sent)
    with abandon.closing(lambda how, error: calls.append(("close", how, error))) if open_sweep else nullcontext():
        done = abandon.watch(read, lambda how, error: calls.append(("farewell", how, error)), lost,
                             end=lambda: calls.append(("end Ray",)))
        ended.wait(1)
        done.set()
    os.close(write)
    return calls, codes


def test_ray_lost_with_no_signal_ends_its_rest_closes_the_sweep_failed_saying_what_died_exits_1(monkeypatch):
    calls, codes = _watched(monkeypatch, lambda: RAYLET_DIED)
    lost = abandon.RAY_LOST
    assert calls == [("end Ray",), ("close", lost, RAYLET_DIED), ("farewell", lost, RAYLET_DIED)]
    assert codes == [1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_ray_lost_after_a_stopping_signal_is_that_signals_interrupt(monkeypatch, sig):
    name = signal.Signals(sig).name
    calls, codes = _watched(monkeypatch, lambda: RAYLET_DIED, sent=bytes([signal.SIGINT, sig]))
    assert calls == [("close", name, None), ("farewell", name, None)] and codes == [128 + sig]


def test_nothing_happens_while_ray_runs_or_when_no_sweep_is_open(monkeypatch):
    assert _watched(monkeypatch, lambda: None, sent=bytes([signal.SIGTERM])) == ([], [])
    assert _watched(monkeypatch, lambda: RAYLET_DIED, open_sweep=False) == ([], [])


def test_no_local_ray_started_here_is_never_lost():
    """No RayRuntime of this process started a local Ray (or it was stopped on purpose, or Ray was joined
    by address): nothing is watched."""
    assert local_ray_lost() is None


EPOCHS = 10


def _kill_when_checkpointed(tmp_path, name: str, process: str
                            ) -> tuple[subprocess.Popen, str, str, int, str, float]:
    """Launch `embinit run`, stop its trial worker at a kept checkpoint (`freeze_at_a_checkpoint`: the
    trial cannot finish meanwhile, however slow the machine), SIGKILL its local Ray's `process` (a child of
    the driver: this test's Ray, never another), and wait for the driver: (proc, output, experiment id,
    the epoch the trial was stopped at, what died, seconds it took the driver to end). The driver's end of
    its Ray kills the stopped worker; should it not, the test does."""
    spec, uri = spec_file(tmp_path, name, EPOCHS)
    proc, lines, reader = launch(spec, tmp_path)
    frozen: list[psutil.Process] = []
    try:
        exp, epoch, frozen = freeze_at_a_checkpoint(proc, lines, name, uri)
        [victim] = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.name() == process]
        t0 = time.monotonic()
        victim.kill()
        proc.wait(timeout=120)
        took = time.monotonic() - t0
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in frozen:
            with suppress(psutil.NoSuchProcess):
                p.kill()
    died = f"the local Ray's {_NAMES[process]} died (pid {victim.pid}, killed by SIGKILL)"
    return proc, "".join(lines), exp, epoch, died, took


@pytest.mark.slow
@pytest.mark.parametrize("process", ["raylet", "gcs_server"])
def test_the_local_ray_dying_closes_the_runs_failed_naming_it_and_a_rerun_resumes(tmp_path, process):
    name = f"lost-{process}"
    proc, err, exp, epoch, died, took = _kill_when_checkpointed(tmp_path, name, process)
    assert 1 <= epoch < EPOCHS, (epoch, err)   # killed mid-trial, with a checkpoint to resume from
    # before: exit 1 after Ray's own wait (13-60 s), the runs left RUNNING. The message is the watcher's
    # (embinit.sweep.abandon), not Ray's: no time bound, which a loaded CI machine exceeds (11 s seen)
    assert proc.returncode == 1, (took, err)
    assert f"embinit: error: the sweep stopped: {died}." in err and "again to resume" in err, (took, err)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    closed = runs(name, uri)
    states = [(r.info.status, r.data.tags.get(STATUS_TAG), r.data.tags.get(ERROR_TAG, "")) for r in closed]
    assert [(s, t) for s, t, _ in states] == [("FAILED", "failed")] * 2, states   # before: RUNNING, running
    assert all(e.startswith(f"the sweep failed: {died}") for _, _, e in states), states
    [trial] = run_readers.trial_records(exp, uri)
    assert trial.resume_epoch == epoch   # where it was stopped: it trained no further
    assert_a_rerun_resumes(tmp_path / f"{name}.yaml", tmp_path, exp, uri, trial)
