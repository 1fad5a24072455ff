"""Ctrl-C during `embinit run`, as a terminal sends it (SIGINT to the whole process group): the running trial is
stopped and recorded as `interrupted`, not failed; the message says that running the spec again resumes, and
Ray Tune's `Tuner.restore` hint does not appear. SIGTERM to `embinit run` (kill, a container stop) does the
same (exit 143), and so does SIGTERM to its whole process group, which reaches the command's supervisor alone
(embinit.cli.supervise), not the driver's local Ray. SIGHUP (the terminal hung up: an ssh connection dropped,
a window closed) does the same (exit 129), on a terminal that is gone by then, and when sent on to the process
group by a shell. A sweep that raises anything else closes its run, and its trials' runs still open, FAILED
with the error (none is left RUNNING)."""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import pytest

from embinit.tracking import mlflow_store, run_readers
from embinit.tracking.records import ERROR_TAG, STATUS_TAG
from tests.helpers.embinit_run import (EPOCHS, Terminal, assert_a_rerun_resumes, closed_interrupted, end_leftovers,
                                       command_group, launch, signal_mid_trial, stopped_mid_trial,
                                       terminate_mid_trial)
from tests.helpers.embinit_run import runs as all_runs
from tests.helpers.embinit_run import spec_file

pytestmark = pytest.mark.usefixtures("terminal_signals")   # the same under `nohup make test`


@pytest.mark.slow
def test_ctrl_c_marks_trials_interrupted_and_says_how_to_resume(tmp_path):
    spec, uri = spec_file(tmp_path, "interrupt-me", 50)
    proc, lines, reader = launch(spec, tmp_path)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:  # the trial started (progress line) ...
            if any(" 1 running" in line for line in lines):
                break
            time.sleep(0.5)
        while time.monotonic() < deadline and proc.poll() is None:  # ... and its MLflow run is open
            if any(t["status"] == "running" for t in run_readers.list_trials("interrupt-me", uri)):
                break
            time.sleep(1)
        assert proc.poll() is None, "".join(lines)
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal
        proc.wait(timeout=180)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err, out = "".join(lines), (tmp_path / "out.txt").read_text()
    assert proc.returncode == 130, err
    assert "Tuner.restore" not in err + out
    assert "the stopped ones are marked 'interrupted'" in err
    assert f"embinit run {spec}` again to resume" in err   # `embinit` or its path (embinit.commands)
    statuses = [t["status"] for t in run_readers.list_trials("interrupt-me", uri)]
    assert statuses == ["interrupted"], statuses


def _breaks_after_a_trial_opened(error: BaseException):
    """A stand-in for `_execute` that opens the first trial's run (as its worker would), then raises."""
    def execute(job, units):
        from embinit.tracking.trial_run import TrialRun
        item = units[0].trials[0]
        TrialRun.open(job.shared.tracking_uri, job.shared.experiment_id, job.shared.parent_run_id, item.config,
                      item.key, item.label, {})
        raise error
    return execute


@pytest.mark.slow   # an MLflow store; the training replaced (no Ray)
def test_a_sweep_that_raises_closes_its_run_and_its_open_trials_failed_with_the_error(tmp_path, monkeypatch):
    """What a `cache_dir` naming a file did in Tune's storage (pyarrow's NotADirectoryError): the sweep's
    run stayed RUNNING, and each retry added another."""
    import embinit.sweep.run as sweep_run
    spec, uri = spec_file(tmp_path, "breaks", 1)
    error = NotADirectoryError(20, "Cannot create directory '/x/afile/ray_results'")
    monkeypatch.setattr(sweep_run, "_execute", _breaks_after_a_trial_opened(error))
    for _ in range(2):   # a retry closes its own run as well
        with pytest.raises(NotADirectoryError):
            sweep_run.run_sweep(str(spec), progress=False)
    runs = all_runs("breaks", uri)
    assert sorted(r.info.status for r in runs) == ["FAILED"] * 4, [(r.info.run_name, r.info.status) for r in runs]
    said = "the sweep failed: NotADirectoryError: [Errno 20] Cannot create directory '/x/afile/ray_results'"
    sweeps = [r for r in runs if r.data.tags.get("embinit.kind") == "sweep"]
    assert len(sweeps) == 2
    for run in runs:
        assert run.data.tags[STATUS_TAG] == "failed" and run.data.tags[ERROR_TAG].startswith(said)
    details = mlflow_store.client(uri).download_artifacts(sweeps[0].info.run_id, "error.txt", str(tmp_path))
    assert "Traceback" in Path(details).read_text()
    assert [t["status"] for t in run_readers.list_trials("breaks", uri)] == ["failed", "failed"]


@pytest.mark.slow   # an MLflow store; the training replaced (no Ray)
def test_an_interrupted_sweep_closes_its_run_killed_saying_how(tmp_path, monkeypatch):
    import embinit.sweep.run as sweep_run
    from embinit.sweep.interrupt import Interrupted
    spec, uri = spec_file(tmp_path, "stopped", 1)
    monkeypatch.setattr(sweep_run, "_execute", _breaks_after_a_trial_opened(Interrupted("SIGTERM")))
    with pytest.raises(KeyboardInterrupt):
        sweep_run.run_sweep(str(spec), progress=False)
    runs = all_runs("stopped", uri)
    assert [r.info.status for r in runs] == ["KILLED", "KILLED"]
    for run in runs:
        assert run.data.tags[STATUS_TAG] == "interrupted"
        assert run.data.tags[ERROR_TAG].startswith("interrupted (SIGTERM); running the same spec again resumes")
    assert [t["status"] for t in run_readers.list_trials("stopped", uri)] == ["interrupted"]


@pytest.mark.slow   # an MLflow store; the training replaced (no Ray)
def test_the_command_says_a_filesystem_error_in_one_line_without_a_traceback(tmp_path, monkeypatch, capsys):
    import embinit.sweep.run as sweep_run
    from embinit.cli import main
    spec, uri = spec_file(tmp_path, "says", 1)
    error = NotADirectoryError(20, "Cannot create directory '/x/afile/ray_results'")
    monkeypatch.setattr(sweep_run, "_execute", _breaks_after_a_trial_opened(error))
    assert main(["run", str(spec), "--quiet"]) == 1
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "mlflow.store.db" not in line]   # MLflow's notes on a new store
    assert len(said) == 1 and "Traceback" not in err, err
    assert said[0].startswith("embinit: error: the sweep stopped: NotADirectoryError: [Errno 20] Cannot create "
                              "directory '/x/afile/ray_results'")
    assert "closed as FAILED with this error" in said[0] and f"embinit run {spec}` again to resume" in said[0]
    assert [r.info.status for r in all_runs("says", uri)] == ["FAILED", "FAILED"]


def _wait(until, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_are_ctrl_c_while_the_command_line_takes_them(sig, monkeypatch):
    """`terminate_as_interrupt` (embinit run's): during training SIGTERM or SIGHUP stops the trials as the
    first Ctrl-C does (the sweep then ends with `Interrupted`); outside training it interrupts at once; the
    handlers before are back afterwards. (Before, SIGHUP's default ended the process at once.)"""
    from embinit.sweep import hangup
    from embinit.sweep.interrupt import Interrupted, stop_on_interrupt, terminate_as_interrupt
    monkeypatch.setattr(hangup, "terminal_fds", lambda: ())   # pytest's own terminal stays
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    said, name = io.StringIO(), signal.Signals(sig).name
    with terminate_as_interrupt() as terminated:
        with pytest.raises(Interrupted) as stopped:
            with stop_on_interrupt(said) as interrupted:
                os.kill(os.getpid(), sig)
                _wait(interrupted)
                assert interrupted()   # training stops through the stopper; nothing raised in its midst
        assert stopped.value.how == name and terminated() == name
        assert f"interrupted ({name}): stopping the running trials" in said.getvalue()
        with pytest.raises(Interrupted) as at_once:
            os.kill(os.getpid(), sig)
            _wait(lambda: False, 5)
        assert at_once.value.how == name
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_signal_ignored_before_stays_ignored_so_nohup_trains_on():
    """`nohup embinit run ...`: SIGHUP is ignored when the command starts, and the sweep must train on after
    the terminal closes; SIGTERM is still taken as Ctrl-C."""
    from embinit.sweep.interrupt import terminate_as_interrupt
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with terminate_as_interrupt():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


@pytest.mark.slow
def test_sigterm_marks_trials_interrupted_closes_the_sweep_and_says_how_to_resume(tmp_path):
    """`kill PID` of `embinit run` mid-trial: Ray's crash handler used to abort the process (exit 134,
    "*** SIGTERM received"), leaving the sweep's and the trial's runs RUNNING (`embinit report`: running)."""
    spec, uri = spec_file(tmp_path, "terminate-me", EPOCHS)
    # to embinit alone, as `kill PID` or a container stop sends it
    returncode, err, exp, epoch = terminate_mid_trial(spec, tmp_path, "terminate-me", uri, lambda p: p.send_signal)
    assert returncode == 143, err
    assert "SIGTERM received" not in err and "Traceback" not in err
    assert "embinit: interrupted (SIGTERM)" in err and f"embinit run {spec}` again to resume" in err
    runs = all_runs("terminate-me", uri)
    assert sorted(r.info.status for r in runs) == ["KILLED", "KILLED"], [(r.info.run_name, r.info.status) for r in runs]
    assert exp == mlflow_store.experiment_id("terminate-me", uri)
    [trial] = run_readers.trial_records(exp, uri)
    stopped_mid_trial(trial, epoch, err)   # a rerun resumes it


@pytest.mark.slow
def test_sigterm_to_the_process_group_closes_the_runs_interrupted_and_a_rerun_resumes(tmp_path):
    """`kill -- -PGID` and `timeout` signal the command's process group. The local Ray's GCS and raylet
    used to be in it: they died at once, and Ray's core worker ended the driver within ~60 ms, in one run
    of four before it had closed the runs (exit 1, the runs RUNNING). Now the group holds the supervisor
    alone (embinit.cli.supervise), which passes the signal on to its driver: Ray stays up to stop the
    trial. (A signal to every process of a job: tests/test_sweep_supervise.py.)"""
    spec, uri = spec_file(tmp_path, "group-term", EPOCHS)
    # the driver and every Ray process in its group (the GCS, the raylet; workers have groups of their own)
    def to_the_group(p):
        assert command_group(p) == [p.pid]   # the driver and its Ray are out of the group's reach
        return lambda sig: os.killpg(p.pid, sig)
    returncode, err, exp, epoch = terminate_mid_trial(spec, tmp_path, "group-term", uri, to_the_group)
    assert returncode == 143, err   # before: 1, at times (Ray ended the driver first)
    assert "Traceback" not in err and "Failed to connect to GCS" not in err, err
    assert "embinit: interrupted (SIGTERM)" in err and f"embinit run {spec}` again to resume" in err
    trial = closed_interrupted("group-term", exp, uri, "SIGTERM", epoch, err)

    assert_a_rerun_resumes(spec, tmp_path, exp, uri, trial)


def _off_the_terminal(pid: int) -> bool:
    """Whether `embinit run` (`pid`) has taken its terminal's hangup: its handler first points the streams
    that were the terminal at /dev/null (embinit.sweep.hangup.detach)."""
    try:
        return os.readlink(f"/proc/{pid}/fd/2") == os.devnull
    except OSError:
        return False


@pytest.mark.slow
def test_a_terminal_that_hangs_up_closes_the_runs_interrupted_and_a_rerun_resumes(tmp_path):
    """`embinit run` in an ssh session or a terminal window, without tmux or nohup, when the connection
    drops or the window closes: its terminal hangs up and the kernel sends it SIGHUP. Before: SIGHUP's
    default ended the driver at once (killed by SIGHUP), and the sweep's and the trial's runs stayed
    RUNNING until a later run closed them. Afterwards its terminal is gone (writes fail with EIO): what
    it says then must not turn the close into a crash."""
    spec, uri = spec_file(tmp_path, "hang-up", EPOCHS)
    terminal = Terminal(spec, tmp_path)
    proc = terminal.proc
    frozen = []
    try:   # the terminal says nothing after the hangup: the driver's handler pointing it at /dev/null says it came
        exp, epoch, frozen = signal_mid_trial(proc, terminal.lines, "hang-up", uri, terminal.hang_up,
                                              lambda: _off_the_terminal(proc.pid))
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        end_leftovers(frozen)
    err = "".join(terminal.lines)
    assert proc.returncode == 128 + signal.SIGHUP, err   # before: -SIGHUP
    trial = closed_interrupted("hang-up", exp, uri, "SIGHUP", epoch, err)
    assert_a_rerun_resumes(spec, tmp_path, exp, uri, trial)


@pytest.mark.slow
def test_sighup_to_the_process_group_closes_the_runs_interrupted(tmp_path):
    """A shell whose terminal hangs up sends SIGHUP on to its jobs' process groups: it reaches the
    supervisor, which passes it on to the driver (before, it reached the local Ray's GCS and raylet too)."""
    spec, uri = spec_file(tmp_path, "group-hup", EPOCHS)
    returncode, err, exp, epoch = terminate_mid_trial(spec, tmp_path, "group-hup", uri,
                                                       lambda p: lambda sig: os.killpg(p.pid, sig), signal.SIGHUP)
    assert returncode == 128 + signal.SIGHUP, err   # before: -SIGHUP, the runs RUNNING
    assert "Traceback" not in err and "Failed to connect to GCS" not in err, err
    assert "embinit: interrupted (SIGHUP)" in err and f"embinit run {spec}` again to resume" in err
    closed_interrupted("group-hup", exp, uri, "SIGHUP", epoch, err)
