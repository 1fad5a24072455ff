"""Ctrl-C during `embinit run`, as a terminal sends it (SIGINT to the whole process group): the running
trial is stopped and recorded as `interrupted`, not failed; the message says that running the spec again
resumes, and Ray Tune's `Tuner.restore` hint does not appear. SIGTERM to `embinit run` (kill, a container
stop) does the same (exit 143), and so does SIGTERM to its whole process group, which kills its local
Ray with it; a sweep that raises anything else closes its run, and its trials' runs still open, FAILED
with the error (none is left RUNNING)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from embinit import mlflow_store, run_readers
from embinit.records import ERROR_TAG, STATUS_TAG

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_ctrl_c_marks_trials_interrupted_and_says_how_to_resume(tmp_path):
    spec, uri = _spec_file(tmp_path, "interrupt-me", 50)
    proc, lines, reader = _launch(spec, tmp_path)
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


def _spec_file(tmp_path: Path, name: str, epochs: int) -> tuple[Path, str]:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"name: {name}\ntasks: [{{task: synthetic_translation, epochs: {epochs}}}]\n"
                    f"inits: [xavier]\nseeds: 1\nresources: {{cpus: 1}}\ncache_dir: {tmp_path}/cache\n"
                    f"mlflow: {{tracking_uri: '{uri}', log_checkpoint: false}}\n")
    return spec, uri


def _launch(spec: Path, tmp_path: Path) -> tuple[subprocess.Popen, list[str], threading.Thread]:
    """`embinit run SPEC` in its own session (a signal reaches it alone), stdout to out.txt; its stderr
    lines collect in the returned list as they come, read by the returned thread."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "embinit", "run", str(spec)], cwd=tmp_path, env=env,
                            stdout=(tmp_path / "out.txt").open("w"), stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    return proc, lines, reader


def _runs(name: str, uri: str) -> list:
    c = mlflow_store.client(uri)
    return c.search_runs([mlflow_store.experiment_id(name, uri)])


def _breaks_after_a_trial_opened(error: BaseException):
    """A stand-in for `_execute` that opens the first trial's run (as its worker would), then raises."""
    def execute(job, units):
        from embinit.trial_run import TrialRun
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
    spec, uri = _spec_file(tmp_path, "breaks", 1)
    error = NotADirectoryError(20, "Cannot create directory '/x/afile/ray_results'")
    monkeypatch.setattr(sweep_run, "_execute", _breaks_after_a_trial_opened(error))
    for _ in range(2):   # a retry closes its own run as well
        with pytest.raises(NotADirectoryError):
            sweep_run.run_sweep(str(spec), progress=False)
    runs = _runs("breaks", uri)
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
    spec, uri = _spec_file(tmp_path, "stopped", 1)
    monkeypatch.setattr(sweep_run, "_execute", _breaks_after_a_trial_opened(Interrupted("SIGTERM")))
    with pytest.raises(KeyboardInterrupt):
        sweep_run.run_sweep(str(spec), progress=False)
    runs = _runs("stopped", uri)
    assert [r.info.status for r in runs] == ["KILLED", "KILLED"]
    for run in runs:
        assert run.data.tags[STATUS_TAG] == "interrupted"
        assert run.data.tags[ERROR_TAG].startswith("interrupted (SIGTERM); running the same spec again resumes")
    assert [t["status"] for t in run_readers.list_trials("stopped", uri)] == ["interrupted"]


@pytest.mark.slow   # an MLflow store; the training replaced (no Ray)
def test_the_command_says_a_filesystem_error_in_one_line_without_a_traceback(tmp_path, monkeypatch, capsys):
    import embinit.sweep.run as sweep_run
    from embinit.cli import main
    spec, uri = _spec_file(tmp_path, "says", 1)
    error = NotADirectoryError(20, "Cannot create directory '/x/afile/ray_results'")
    monkeypatch.setattr(sweep_run, "_execute", _breaks_after_a_trial_opened(error))
    assert main(["run", str(spec), "--quiet"]) == 1
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "mlflow.store.db" not in line]   # MLflow's notes on a new store
    assert len(said) == 1 and "Traceback" not in err, err
    assert said[0].startswith("embinit: error: the sweep stopped: NotADirectoryError: [Errno 20] Cannot create "
                              "directory '/x/afile/ray_results'")
    assert "closed as FAILED with this error" in said[0] and f"embinit run {spec}` again to resume" in said[0]
    assert [r.info.status for r in _runs("says", uri)] == ["FAILED", "FAILED"]


def _wait(until, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_sigterm_is_ctrl_c_while_the_command_line_takes_it():
    """`terminate_as_interrupt` (embinit run's): during training SIGTERM stops the trials as the first
    Ctrl-C does (the sweep then ends with `Interrupted`); outside training it interrupts at once; the
    handlers before are back afterwards."""
    from embinit.sweep.interrupt import Interrupted, stop_on_interrupt, terminate_as_interrupt
    term, intr = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    said = io.StringIO()
    with terminate_as_interrupt() as terminated:
        with pytest.raises(Interrupted) as stopped:
            with stop_on_interrupt(said) as interrupted:
                os.kill(os.getpid(), signal.SIGTERM)
                _wait(interrupted)
                assert interrupted()   # training stops through the stopper; nothing raised in its midst
        assert stopped.value.how == "SIGTERM" and terminated()
        assert "interrupted (SIGTERM): stopping the running trials" in said.getvalue()
        with pytest.raises(Interrupted) as at_once:
            os.kill(os.getpid(), signal.SIGTERM)
            _wait(lambda: False, 5)
        assert at_once.value.how == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is term and signal.getsignal(signal.SIGINT) is intr


def _wait_for_a_checkpoint(proc, lines: list[str], name: str, uri: str, timeout: float = 240) -> str:
    """Wait until `embinit run` (`proc`, its output in `lines`) trains experiment `name`'s trial and the
    trial's run keeps a checkpoint (resumable once stopped); returns the experiment id."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:   # the trial started (the store is made)
        if any(" 1 running" in line for line in lines):
            break
        time.sleep(0.5)
    exp = mlflow_store.experiment_id(name, uri)
    while time.monotonic() < deadline and proc.poll() is None:
        if exp is not None and any(r.resume_epoch is not None for r in run_readers.trial_records(exp, uri)):
            break
        time.sleep(0.5)
        exp = exp or mlflow_store.experiment_id(name, uri)
    assert proc.poll() is None, "".join(lines)
    return exp


def _terminate_once_checkpointed(spec: Path, tmp_path: Path, name: str, uri: str, sender) -> tuple[int, str, str]:
    """Launch `embinit run spec`, send SIGTERM through `sender(proc)` once its trial keeps a checkpoint,
    and wait for it to end: (its exit code, its output, the experiment id)."""
    proc, lines, reader = _launch(spec, tmp_path)
    try:
        exp = _wait_for_a_checkpoint(proc, lines, name, uri)
        sender(proc)(signal.SIGTERM)
        proc.wait(timeout=180)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, "".join(lines), exp


@pytest.mark.slow
def test_sigterm_marks_trials_interrupted_closes_the_sweep_and_says_how_to_resume(tmp_path):
    """`kill PID` of `embinit run` mid-trial: Ray's crash handler used to abort the process (exit 134,
    "*** SIGTERM received"), leaving the sweep's and the trial's runs RUNNING (`embinit report`: running)."""
    spec, uri = _spec_file(tmp_path, "terminate-me", 50)
    # to embinit alone, as `kill PID` or a container stop sends it
    returncode, err, _ = _terminate_once_checkpointed(spec, tmp_path, "terminate-me", uri, lambda p: p.send_signal)
    assert returncode == 143, err
    assert "SIGTERM received" not in err and "Traceback" not in err
    assert "embinit: interrupted (SIGTERM)" in err and f"embinit run {spec}` again to resume" in err
    runs = _runs("terminate-me", uri)
    assert sorted(r.info.status for r in runs) == ["KILLED", "KILLED"], [(r.info.run_name, r.info.status) for r in runs]
    exp = mlflow_store.experiment_id("terminate-me", uri)
    [trial] = run_readers.trial_records(exp, uri)
    assert trial.status == "interrupted" and trial.resume_epoch is not None   # a rerun resumes it


@pytest.mark.slow
def test_sigterm_to_the_process_group_closes_the_runs_interrupted_and_a_rerun_resumes(tmp_path):
    """`kill -- -PGID`, `timeout`, Slurm's scancel and `systemctl stop` signal Ray's GCS, raylet and workers
    with the driver. Before: the driver waited for the dead GCS until Ray ended it 60 s later (exit 1,
    "Failed to connect to GCS within 60 seconds"), and the sweep's and the trial's runs stayed RUNNING."""
    spec, uri = _spec_file(tmp_path, "group-term", 6)
    # the driver and every Ray process it started
    returncode, err, exp = _terminate_once_checkpointed(spec, tmp_path, "group-term", uri,
                                                        lambda p: lambda sig: os.killpg(p.pid, sig))
    assert returncode == 143, err   # before: 1, after Ray's 60 s wait for its dead GCS
    assert "Traceback" not in err and "Failed to connect to GCS" not in err, err
    assert "embinit: interrupted (SIGTERM)" in err and f"embinit run {spec}` again to resume" in err
    runs = _runs("group-term", uri)
    assert sorted(r.info.status for r in runs) == ["KILLED", "KILLED"], [(r.info.run_name, r.info.status) for r in runs]
    for run in runs:
        assert run.data.tags[ERROR_TAG].startswith("interrupted (SIGTERM); running the same spec again resumes")
    [trial] = run_readers.trial_records(exp, uri)
    assert trial.status == "interrupted" and trial.resume_epoch is not None

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled"}
    again = subprocess.run([sys.executable, "-m", "embinit", "run", str(spec), "--quiet"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stderr[-3000:]
    [done] = run_readers.trial_records(exp, uri)
    assert (done.run_id, done.status) == (trial.run_id, "finished")     # resumed into the same run
    run = mlflow_store.client(uri).get_run(done.run_id)
    assert run.data.tags["embinit.resumed_after_epoch"] == str(trial.resume_epoch)
