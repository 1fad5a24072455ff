"""`embinit run` supervises its driver (embinit.cli.supervise, embinit.sweep.guardian): what no process
group keeps out, a signal to every process of a job (Slurm's scancel, `systemctl stop`) or the driver
killed outright (the OOM killer), still ends with the sweep's runs closed as interrupted, the command
saying so with the signal's exit code, and a rerun that resumes."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest

from embinit.cli import supervise
from embinit.sweep import guardian
from tests.helpers.embinit_run import (EPOCHS, assert_a_rerun_resumes, closed_interrupted, driver, end_leftovers,
                                       launch, runs, signal_mid_trial, spec_file, stopped_mid_trial,
                                       terminate_mid_trial)
from embinit.tracking import run_readers
from embinit.tracking.records import ERROR_TAG, STATUS_TAG

pytestmark = pytest.mark.usefixtures("terminal_signals")   # the same under `nohup make test`


def _lines(*messages) -> list[str]:
    return [json.dumps(m) for m in messages]


def _sweep(parent: str) -> dict:
    return {"exp_id": "1", "uri": "sqlite:///x.db", "runs_uri": "sqlite:///x.db", "parent": parent}


def test_the_sweeps_left_open_are_those_opened_and_not_closed():
    said = _lines({"opened": _sweep("a")}, {"opened": _sweep("b")}, {"closed": "a"}) + ['{"opened": {"exp']
    assert guardian.left_open(said) == [_sweep("b")]   # a line cut short by the driver's end is no message
    assert guardian.left_open(_lines({"opened": _sweep("a")}, {"closed": "a"})) == []


@pytest.mark.parametrize("code, received, closes, said, exit_code", [
    (143, [signal.SIGTERM], 0, None, 143),                 # the driver closed its runs and said so itself
    (1, [signal.SIGTERM], 1, ("SIGTERM", 1), 143),         # Ray ended it first: closed here, said here
    (1, [signal.SIGTERM], 0, ("SIGTERM", 1), 143),         # it closed them, but was ended before it said so
    (-9, [], 1, (None, -9), 137),                          # killed outright with no signal to the command
    (1, [], 0, None, 1),                                   # failed trials: its own exit code
    (0, [signal.SIGHUP], 0, None, 0),                      # it finished anyway
    (1, [signal.SIGINT, signal.SIGTERM], 1, ("Ctrl-C", 1), 130),
])
def test_the_exit_code_and_the_farewell_after_the_driver_ended(monkeypatch, code, received, closes, said, exit_code):
    told = []
    monkeypatch.setattr(guardian, "close_left_open", lambda sweeps, how, rc: closes)
    opened = _lines({"opened": _sweep("a")})
    assert supervise._after(code, opened, received, lambda how, rc: told.append((how, rc))) == exit_code
    assert told == ([said] if said else [])


@pytest.mark.parametrize("code, closes", [(130, 1), (1, 0)], ids=["quit-leaving-runs-open", "ended-by-ray"])
def test_a_driver_that_said_it_was_interrupted_is_not_said_again(monkeypatch, code, closes):
    """Found in the resume walkthrough: Ctrl-C twice printed `embinit: interrupted (Ctrl-C). ...` twice: the
    driver said it, then quit at once leaving its runs open (exit 130) or was ended by its Ray (exit 1),
    and the supervisor, closing the runs or seeing the driver cut short, said it again."""
    told = []
    monkeypatch.setattr(guardian, "close_left_open", lambda sweeps, how, rc: closes)
    said = _lines({"opened": _sweep("a")}, guardian.SAID_INTERRUPTED)
    received = [signal.SIGINT, signal.SIGINT]
    assert supervise._after(code, said, received, lambda how, rc: told.append((how, rc))) == 130
    assert told == []


def test_a_store_that_fails_is_said_and_the_drivers_exit_code_kept(monkeypatch, capsys):
    def fails(sweeps, how, rc):
        raise OSError("disk full")
    monkeypatch.setattr(guardian, "close_left_open", fails)
    assert supervise._after(-9, _lines({"opened": _sweep("a")}), [], lambda how, rc: None) == 137
    assert "could not close the sweep's MLflow runs after its driver ended (killed by SIGKILL): OSError: disk full" \
        in capsys.readouterr().err


def test_a_driver_that_inherited_the_variable_is_not_told_to(monkeypatch):
    """Only the supervisor's own child takes the pipe, and the variable goes: Ray's processes, started by
    the driver, do not inherit it."""
    read, write = os.pipe()
    try:
        monkeypatch.setenv(guardian.GUARDIAN_ENV, f"{write}:{os.getppid() + 1}")
        guardian.take()
        assert guardian._fd is None and guardian.GUARDIAN_ENV not in os.environ
        monkeypatch.setenv(guardian.GUARDIAN_ENV, f"{write}:{os.getppid()}")
        guardian.take()
        guardian.closed("a")
        assert os.read(read, 100) == b'{"closed": "a"}\n' and guardian.GUARDIAN_ENV not in os.environ
    finally:
        monkeypatch.setattr(guardian, "_fd", None)
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("ignored", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_ignored_when_the_command_starts_is_not_passed_on(monkeypatch, ignored):
    """`embinit run SPEC &` in a script starts with SIGINT ignored, `nohup embinit run` with SIGHUP: the
    supervisor leaves that one ignored (a Ctrl-C meant for the script does not stop the sweep) and passes
    the others on."""
    seen = {}

    class Driver:
        pid = 0

        def __init__(self, *args, **kwargs):
            seen.update({sig: signal.getsignal(sig) for sig in supervise.FORWARDED})

        def wait(self):
            return 0

    monkeypatch.setattr(supervise.subprocess, "Popen", Driver)
    before = signal.signal(ignored, signal.SIG_IGN)
    try:
        assert supervise.supervise(["run", "x.yaml"], lambda how, rc: None) == 0
        assert signal.getsignal(ignored) is signal.SIG_IGN
    finally:
        signal.signal(ignored, before)
    assert seen[ignored] is signal.SIG_IGN
    assert all(callable(seen[sig]) and seen[sig] not in (signal.SIG_IGN, signal.SIG_DFL)
               for sig in supervise.FORWARDED if sig != ignored)


@pytest.mark.slow
def test_sigterm_to_every_process_of_the_job_closes_the_runs_interrupted_and_a_rerun_resumes(tmp_path):
    """Slurm's scancel and time limit and `systemctl stop` signal every process of the job: the
    supervisor, the driver and its local Ray's GCS and raylet (the driver's group). Ray's core worker may
    end the driver within ~60 ms, before it has closed anything (exit 1, the runs RUNNING, in one run of
    four before the supervisor): whichever closes them, they are closed as interrupted, and the command
    exits 143."""
    spec, uri = spec_file(tmp_path, "job-term", EPOCHS)

    def to_every_process(p):
        d = driver(p)
        return lambda sig: (os.killpg(p.pid, sig), os.killpg(d.pid, sig))
    returncode, err, exp, epoch = terminate_mid_trial(spec, tmp_path, "job-term", uri, to_every_process)
    assert returncode == 143, err
    assert "Traceback" not in err and "embinit: interrupted (SIGTERM)" in err, err
    assert f"embinit run {spec}` again to resume" in err
    trial = closed_interrupted("job-term", exp, uri, "SIGTERM", epoch, err)
    assert_a_rerun_resumes(spec, tmp_path, exp, uri, trial)


@pytest.mark.slow
def test_a_driver_killed_outright_has_its_runs_closed_by_the_supervisor_and_a_rerun_resumes(tmp_path):
    """The OOM killer (or anyone) SIGKILLs the driver: it closes nothing, and its runs stayed RUNNING until
    a later run of the spec closed them. The supervisor closes them as interrupted, naming how the driver
    ended, says so, and exits as the driver did (137)."""
    spec, uri = spec_file(tmp_path, "driver-killed", EPOCHS)
    proc, lines, reader = launch(spec, tmp_path)
    frozen = []
    try:
        d = driver(proc)
        exp, epoch, frozen = signal_mid_trial(proc, lines, "driver-killed", uri, lambda: d.kill(),
                                              lambda: not d.is_running() or d.status() == psutil.STATUS_ZOMBIE)
        proc.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        end_leftovers(frozen)
    err = "".join(lines)
    assert proc.returncode == 128 + signal.SIGKILL, err
    assert "the sweep's driver ended (killed by SIGKILL) without closing its MLflow runs" in err, err
    assert f"embinit run {spec}` again to resume" in err
    found = runs("driver-killed", uri)
    statuses = [(r.info.run_name, r.info.status) for r in found]
    assert sorted(s for _, s in statuses) == ["KILLED", "KILLED"], statuses
    for run in found:
        assert run.data.tags[STATUS_TAG] == "interrupted"
        assert run.data.tags[ERROR_TAG].startswith("interrupted (the sweep's driver ended without closing its runs: "
                                                   "killed by SIGKILL); running the same spec again resumes")
    [trial] = run_readers.trial_records(exp, uri)
    stopped_mid_trial(trial, epoch, err)
    assert_a_rerun_resumes(spec, tmp_path, exp, uri, trial)
