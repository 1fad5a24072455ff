"""A sweep whose driver was killed outright (SIGKILL, the OOM killer) closes nothing: its run and its
trials' runs stay RUNNING. Before: `embinit report` counted such a trial as "running" with no hint, the dry
run said nothing, and a rerun resumed the trial but left the dead sweep's own run RUNNING for ever. Now the
sweep's run names its driver process (`embinit.driver`), the report and the dry run say the trial is not
training, and the next run of a spec in the experiment closes the dead sweep's runs as interrupted. A
driver this machine cannot check (another machine or container) is judged by its heartbeat: silent for
ten minutes, it is reported gone, but its runs are closed only from its own machine."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embinit.checkpoint_files import LAST_INFO, last_info_text
from embinit.sweep import trial_folders
from embinit.tracking import driver_liveness, mlflow_store, run_readers, run_writers
from embinit.cli.dry_run import dry_run
from embinit.tracking.driver_liveness import DRIVER_TAG, HEARTBEAT_TAG
from embinit.tracking.records import ERROR_TAG, STATUS_TAG
from embinit.report.table import build_report
from embinit.spec import load_spec
from embinit.tracking.trial_run import TrialRun

ROOT = Path(__file__).resolve().parents[1]


def _dead_driver() -> str:
    """The driver tag of a process that has ended (as a SIGKILLed driver has)."""
    code = "from embinit.tracking import driver_liveness; print(driver_liveness.current())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT)})
    return out.stdout.strip()


def test_a_driver_is_alive_while_it_runs_and_unknown_elsewhere():
    assert driver_liveness.alive(driver_liveness.current()) is True
    assert driver_liveness.alive(_dead_driver()) is False
    elsewhere = {**json.loads(driver_liveness.current()), "boot": "another-machine"}
    assert driver_liveness.alive(json.dumps(elsewhere)) is None
    assert driver_liveness.alive(None) is None and driver_liveness.alive("not json") is None


def _sweep_with_an_open_trial(tmp_path: Path, name: str, driver: str | None) -> tuple:
    """A sweep run (its driver tag replaced by `driver`) and one trial run of it, both RUNNING."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = load_spec({"name": name, "tasks": [{"task": "synthetic_translation", "epochs": 3}], "inits": ["xavier"],
                      "seeds": 1, "mlflow": {"tracking_uri": uri}, "cache_dir": str(tmp_path / "cache")})
    exp = mlflow_store.ensure_experiment(name, uri)
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), 1, run_name=name)
    if driver is not None:
        mlflow_store.client(uri).set_tag(parent, DRIVER_TAG, driver)
    (p,) = spec.plan()
    trial = TrialRun.open(uri, exp, parent, p.config, p.key, p.label, {})
    return spec, uri, exp, parent, trial.run_id


@pytest.mark.slow   # MLflow stores
def test_a_dead_sweep_s_trial_is_reported_not_training_and_the_next_run_closes_it(tmp_path):
    spec, uri, exp, parent, trial = _sweep_with_an_open_trial(tmp_path, "killed", _dead_driver())
    report = build_report("killed", uri)
    assert [t["run_id"] for t in report.stale] == [trial]
    text = report.to_markdown()
    assert "Not training although MLflow says RUNNING" in text and "its sweep's driver (pid " in text, text
    assert "RUNNING in MLflow, not training: its sweep's driver (pid" in dry_run(spec, uri)

    said = run_writers.close_dead_sweeps(exp, uri)
    assert len(said) == 1 and parent in said[0] and "is gone: closed as interrupted" in said[0]
    c = mlflow_store.client(uri)
    for run_id in (parent, trial):
        run = c.get_run(run_id)
        assert (run.info.status, run.data.tags[STATUS_TAG]) == ("KILLED", "interrupted")
        assert "running the same spec again resumes" in run.data.tags[ERROR_TAG]
    assert [t["status"] for t in run_readers.list_trials("killed", uri)] == ["interrupted"]
    assert build_report("killed", uri).stale == []


@pytest.mark.slow   # MLflow stores
@pytest.mark.parametrize("driver", ["live", "elsewhere", None])
def test_a_sweep_that_may_be_training_is_neither_flagged_nor_closed(tmp_path, driver):
    tag = {"live": driver_liveness.current(),
           "elsewhere": json.dumps({**json.loads(_dead_driver()), "boot": "another-machine"}),
           None: None}[driver]
    spec, uri, exp, parent, trial = _sweep_with_an_open_trial(tmp_path, "maybe", tag)
    if driver is None:   # a sweep run of an embinit before the tag
        mlflow_store.client(uri).delete_tag(parent, DRIVER_TAG)
    assert build_report("maybe", uri).stale == []
    assert "not training" not in dry_run(spec, uri)
    assert run_writers.close_dead_sweeps(exp, uri) == []
    c = mlflow_store.client(uri)
    assert [c.get_run(r).info.status for r in (parent, trial)] == ["RUNNING", "RUNNING"]


def _kept(spec, uri: str, exp: str, epoch: int) -> None:
    """The checkpoint folder the spec's trial leaves after `epoch` (its `last.json` is what is read)."""
    (p,) = spec.plan()
    folder = trial_folders.experiment_folder(spec.cache_dir, uri, exp) / p.key
    folder.mkdir(parents=True)
    (folder / LAST_INFO).write_text(last_info_text(p.key, epoch))


@pytest.mark.slow   # MLflow stores
def test_the_dry_run_says_where_an_interrupted_trial_resumes(tmp_path):
    spec, uri, exp, parent, trial = _sweep_with_an_open_trial(tmp_path, "resumes", _dead_driver())
    TrialRun(uri, trial).log_epoch(2, {"val/loss": 1.5, "train/loss": 2.0}, checkpoint=True)
    _kept(spec, uri, exp, 2)
    assert ("[RUNNING in MLflow, not training: its sweep's driver (pid" in dry_run(spec, uri)
            and "the run resumes it after epoch 2]" in dry_run(spec, uri))
    run_writers.close_dead_sweeps(exp, uri)
    text = dry_run(spec, uri)
    (line,) = [x for x in text.splitlines() if spec.plan()[0].key in x]
    assert line.endswith("[interrupted after epoch 2: the run resumes it from its checkpoint]"), line
    # the cost counts the one epoch of 3 left after the checkpoint, not the whole trial
    assert "1 trial resumes from a checkpoint (marked above): the 2 epochs already trained are not counted" in text
    assert "  total: 1 trial-epochs;" in text, text


@pytest.mark.slow   # MLflow stores
def test_a_driver_on_another_machine_silent_for_ten_minutes_is_reported_gone_but_not_closed(tmp_path):
    """Another machine's process cannot be looked at; its heartbeat can. A silence past SILENT_S is
    reported (the report, the dry run); closing its runs is left to a rerun on its own machine."""
    elsewhere = json.dumps({**json.loads(_dead_driver()), "boot": "another-machine"})
    spec, uri, exp, parent, trial = _sweep_with_an_open_trial(tmp_path, "silent", elsewhere)
    c = mlflow_store.client(uri)
    quiet = time.time() - driver_liveness.SILENT_S - 120
    c.set_tag(parent, HEARTBEAT_TAG, driver_liveness.beat_value(quiet))
    report = build_report("silent", uri)
    assert [t["run_id"] for t in report.stale] == [trial]
    assert "has not been heard from for 12 min (a running driver says so every 60 s)" in report.to_markdown()
    assert "RUNNING in MLflow, not training: its sweep's driver (pid" in dry_run(spec, uri)
    assert run_writers.close_dead_sweeps(exp, uri) == []
    assert [c.get_run(r).info.status for r in (parent, trial)] == ["RUNNING", "RUNNING"]
    c.set_tag(parent, HEARTBEAT_TAG, driver_liveness.beat_value(time.time() - driver_liveness.SILENT_S + 60))
    assert build_report("silent", uri).stale == []      # heard from within SILENT_S: it may be training


@pytest.mark.slow   # an MLflow store
def test_a_running_sweep_s_heartbeat_advances_and_stops_with_it(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = mlflow_store.ensure_experiment("beats", uri)
    parent = run_writers.start_parent_run(exp, uri, "0" * 64, "{}", 1, run_name="beats")
    c = mlflow_store.client(uri)
    assert driver_liveness.silent_s(c.get_run(parent).data.tags) < 60      # the first beat: at its start
    c.set_tag(parent, HEARTBEAT_TAG, "1000")
    with driver_liveness.heartbeat(parent, uri, every=0.2):
        deadline = time.monotonic() + 20
        while c.get_run(parent).data.tags[HEARTBEAT_TAG] == "1000" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert driver_liveness.silent_s(c.get_run(parent).data.tags) < 60
    c.set_tag(parent, HEARTBEAT_TAG, "1000")
    time.sleep(1.0)
    assert c.get_run(parent).data.tags[HEARTBEAT_TAG] == "1000"            # stopped with the sweep


@pytest.mark.slow   # MLflow stores
def test_the_dry_run_says_a_trial_whose_checkpoint_is_not_here_starts_over(tmp_path):
    """Found in an acceptance walkthrough: the run said it kept a checkpoint after epoch 2, but its folder is
    not under this spec's cache_dir (the spec's `cache_dir` changed, a cleared cache, another node): the
    dry run said `the run resumes it from its checkpoint` and costed 1 epoch, and the run trained all 3."""
    spec, uri, exp, parent, trial = _sweep_with_an_open_trial(tmp_path, "elsewhere", _dead_driver())
    TrialRun(uri, trial).log_epoch(2, {"val/loss": 1.5, "train/loss": 2.0}, checkpoint=True)
    folder = trial_folders.experiment_folder(spec.cache_dir, uri, exp)
    text = dry_run(spec, uri)
    assert "[RUNNING in MLflow, not training: its sweep's driver (pid" in text and "resumes" not in text, text
    assert (f"is gone, but its checkpoint is not in {folder} (another cache_dir or node, or a cleared cache): "
            "the run starts it over]") in text, text
    run_writers.close_dead_sweeps(exp, uri)
    text = dry_run(spec, uri)
    (line,) = [x for x in text.splitlines() if spec.plan()[0].key in x]
    assert line.endswith(f"[interrupted after epoch 2, but its checkpoint is not in {folder} (another cache_dir "
                         "or node, or a cleared cache): the run starts it over]"), line
    assert "resumes from a checkpoint" not in text and "  total: 3 trial-epochs;" in text, text
    _kept(spec, uri, exp, 2)   # the folder is back: the run resumes it
    assert "[interrupted after epoch 2: the run resumes it from its checkpoint]" in dry_run(spec, uri)
