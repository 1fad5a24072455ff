"""A trial that its whole sweep lost (the driver, the local Ray, the API: killed) resumes from its kept
checkpoint folder when the spec runs again, in the same MLflow run; a trial key is claimed while it
trains, so a second sweep sharing it waits and reuses the result instead of training it twice.

The trainable runs here without Ray (Tune's `report` and `get_checkpoint` are stood in for); the sweep
is "killed" by an exception that nothing in the trainable catches (a BaseException, as a dying process
catches nothing), after epoch 2 was checkpointed and logged. The slow test at the end kills a real
`run_sweep` process (driver and local Ray) with SIGKILL and runs the spec again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from ray import tune

from embinit.tracking import mlflow_store, records, run_readers, run_writers
from embinit.report.table import build_report
from embinit.spec import load_spec
from embinit.sweep import resume, trial_folders
from embinit.sweep.analyses import shared_settings
from embinit.sweep.work import SweepContext, Unit, work_item
from embinit.sweep.trainable import train_unit
from embinit.trusted import TRUSTED_ROOTS_ENV
from helpers.sweep import sweep_spec_data

pytestmark = pytest.mark.slow  # MLflow SQLite stores and a few tiny trainings: ~1 min in all

ROOT = Path(__file__).resolve().parents[1]
TINY = {"task": "synthetic_translation", "epochs": 4, "max_train_examples": 200, "d_model": 16,
        "ff_dim": 32, "heads": 2, "layers": 1}


class Killed(BaseException):
    """The process died: nothing in the trainable may catch it."""


class KillAfter:
    """Kills the sweep at the end of `epoch` (its checkpoint and metrics are written by then)."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_epoch_end(self, ctx, epoch, metrics):
        if epoch == self.epoch:
            raise Killed()


class Record:
    """Where each attempt started (optimizer steps done) and which epochs it trained."""

    def __init__(self, log: list):
        self.log = log

    def on_train_start(self, ctx):
        self.log.append(("start", ctx.cfg.init, ctx.step))

    def on_epoch_end(self, ctx, epoch, metrics):
        self.log.append(("epoch", ctx.cfg.init, epoch))


@pytest.fixture
def no_tune(monkeypatch):
    """Tune's session calls, outside Tune: reports are kept, no checkpoint to restore."""
    reports: list[dict] = []
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: reports.append(metrics))
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    return reports


@pytest.fixture
def tune_session(monkeypatch):
    """Tune's session calls, outside Tune, as a retry without a Tune checkpoint sees them: each report's
    metrics and its checkpoint's files (None: the report carried no checkpoint); `get_checkpoint` None."""
    reports: list[tuple[dict, list[str] | None]] = []

    def report(metrics, checkpoint=None):
        files = None if checkpoint is None else sorted(
            str(f.relative_to(checkpoint.path)) for f in Path(checkpoint.path).rglob("*") if f.is_file())
        reports.append((metrics, files))
    monkeypatch.setattr(tune, "report", report)
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    return reports


def attempt(shared, units, callbacks) -> str:
    """One attempt of every unit in the sweep `shared` (a Tune trial's first attempt, or its retry)."""
    for i in range(len(units)):
        try:
            train_unit({"unit": i}, shared, units, extra_callbacks=lambda cfg: callbacks(cfg))
        except Killed:
            return "killed"
    return "done"


def setup(tmp: Path, name: str, **over):
    data = sweep_spec_data(name, tmp, TINY, mlflow={"tracking_uri": f"sqlite:///{tmp}/m.db",
                                                    "log_plots": False})
    data.update(over)
    return load_spec(data)


def sweep(spec, units, callbacks) -> tuple[dict, str]:
    """One sweep of `spec`'s units, as a driver runs them (a parent run, the shared settings);
    `callbacks`: a list for every trial, or `f(cfg) -> list`."""
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    exp_id = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp_id, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials())
    shared = SweepContext(uri, exp_id, parent, log_checkpoint=False, log_plots=False, cache_dir=spec.cache_dir,
                          analyses=shared_settings(spec))
    for i in range(len(units)):
        try:
            train_unit({"unit": i}, shared, units,
                       extra_callbacks=callbacks if callable(callbacks) else lambda cfg: callbacks)
        except Killed:
            return shared, "killed"
    return shared, "done"


def units_of(spec, fused: bool = False) -> list[dict]:
    items = [work_item(spec, p) for p in spec.plan()]
    return [Unit(tuple(items), fused=True)] if fused else [Unit((i,)) for i in items]


def trial_runs(shared) -> list:
    return [r for r in mlflow_store.search_runs(shared.experiment_id, shared.tracking_uri)
            if records.KEY_TAG in r.data.tags]


def steps(uri: str, run_id: str, metric: str) -> list[int]:
    return sorted(m.step for m in mlflow_store.client(uri).get_metric_history(run_id, metric))


def assert_resumed_in_one_run(shared, first_parent: str, keys: set[str], kept_epoch: int) -> None:
    uri = shared.tracking_uri
    runs = trial_runs(shared)
    assert {r.data.tags[records.KEY_TAG] for r in runs} == keys
    assert len(runs) == len(keys)                      # no second run for any key
    for run in runs:
        assert run.info.status == "FINISHED", run.data.tags.get(records.ERROR_TAG)
        tags = run.data.tags
        assert tags[records.RESUMED_TAG] == str(kept_epoch)
        assert tags[records.PARENT_TAG] == shared.parent_run_id != first_parent
        assert records.ERROR_TAG not in tags and records.CHECKPOINT_TAG not in tags  # no empty tag
        for metric in ("val/loss", "train/loss"):          # every epoch once: continuous, nothing redone
            assert steps(uri, run.info.run_id, metric) == [1, 2, 3, 4]
    folder = resume.experiment_folder(shared)
    assert not folder.exists() or not any(folder.iterdir())   # nothing left once recorded


def test_a_lost_sweep_resumes_its_trial_from_the_checkpoint_in_the_same_run(tmp_path, no_tune):
    spec = setup(tmp_path, "lost")
    units = units_of(spec)
    first, outcome = sweep(spec, units, [KillAfter(2)])
    assert outcome == "killed"
    (run,) = trial_runs(first)
    assert run.info.status == "RUNNING" and run.data.tags[records.CHECKPOINT_TAG] == "2"
    # What the reconciler (or the sweep's own cleanup) does with a run whose driver is gone:
    assert run_writers.close_orphans(first.experiment_id, first.tracking_uri, first.parent_run_id,
                                  "the experiment's Ray driver is gone") == 1
    (rec,) = run_readers.trial_records(first.experiment_id, first.tracking_uri)
    assert (rec.status, rec.resume_epoch) == ("failed", 2)
    assert "running the spec again resumes this run" in rec.error

    log: list = []
    second, outcome = sweep(spec, units, [Record(log)])
    assert outcome == "done"
    (start,) = [e for e in log if e[0] == "start"]
    assert start[2] > 0                                     # it started with epoch 2's optimizer steps
    assert [e[2] for e in log if e[0] == "epoch"] == [3, 4]  # and trained epochs 3 and 4 only
    assert_resumed_in_one_run(second, first.parent_run_id, {p.key for p in spec.plan()}, 2)
    (rec,) = run_readers.trial_records(second.experiment_id, second.tracking_uri)
    assert rec.status == "finished" and not rec.resumable


def test_a_rerun_that_finds_no_checkpoint_starts_over_in_a_run_of_its_own(tmp_path, no_tune):
    """Found in an acceptance walkthrough: a trial interrupted after epoch 2 whose folder the rerun does not
    find (its spec's `cache_dir` changed, a cleared cache, another node without the object store) trained
    again from epoch 1 in a new run, as it must, but its interrupted run kept saying that running the spec
    again continues it after epoch 2 (`embinit.checkpoint_epoch` 2), for ever. Now the new run names it
    (`embinit.restarted_from`) and it is closed failed naming the new one (`embinit.superseded_by`), as a
    dead attempt within one sweep is; the report counts the key once."""
    spec = setup(tmp_path, "strand")
    units = units_of(spec)
    first, outcome = sweep(spec, units, [KillAfter(2)])
    assert outcome == "killed"
    run_writers.close_orphans(first.experiment_id, first.tracking_uri, first.parent_run_id,
                              "interrupted (Ctrl-C)", *records.INTERRUPTED)
    (dead,) = trial_runs(first)
    assert dead.data.tags[records.CHECKPOINT_TAG] == "2"
    shutil.rmtree(resume.experiment_folder(first))   # the rerun looks elsewhere: the folder is not there
    log: list = []
    second, outcome = sweep(spec, units, [Record(log)])
    assert outcome == "done"
    assert [e[2] for e in log if e[0] == "epoch"] == [1, 2, 3, 4]   # started over: nothing to resume from
    c = mlflow_store.client(second.tracking_uri)
    (new,) = [r for r in trial_runs(second) if r.info.run_id != dead.info.run_id]
    old = c.get_run(dead.info.run_id)
    assert new.info.status == "FINISHED" and new.data.tags[records.RESTARTED_TAG] == dead.info.run_id
    assert (old.info.status, old.data.tags[records.STATUS_TAG]) == ("FAILED", "failed")
    assert old.data.tags[records.SUPERSEDED_TAG] == new.info.run_id
    assert records.CHECKPOINT_TAG not in old.data.tags and new.info.run_id in old.data.tags[records.ERROR_TAG]
    (row,) = build_report("strand", second.tracking_uri).rows
    assert row["n"] == 1 and not row.get("failed")


def test_a_restarted_unit_counts_the_trials_its_first_attempt_finished_as_done_not_reused(tmp_path, no_tune):
    """Found in an acceptance walkthrough (`execution: {trials_per_unit: 3}`, a Ray worker killed mid-unit):
    Tune's retry of the unit found the trials its first attempt had finished and reported them reused, as
    if another sweep had trained them: the progress line ended `6/6 done (4 reused)` where the sweep's
    summary said 2 reused. Only a run another sweep finished is reused."""
    spec = setup(tmp_path, "unit", seeds=[0, 1])
    items = [work_item(spec, p) for p in spec.plan()]
    units, second = [Unit(tuple(items))], items[1].key
    shared, outcome = sweep(spec, units, lambda cfg: [KillAfter(2)] if cfg.key() == second else [])
    assert outcome == "killed"
    assert attempt(shared, units, lambda cfg: []) == "done"      # Tune's retry, in the same sweep
    assert (no_tune[-1]["embinit_trials"], no_tune[-1]["embinit_reused"]) == (2, 0)
    sweep(spec, units, [])                                        # a later sweep reuses both
    assert (no_tune[-1]["embinit_trials"], no_tune[-1]["embinit_reused"]) == (2, 2)


def test_a_resumed_trial_logs_no_step_twice(tmp_path, no_tune):
    """The probe measures when training starts, at the resumed step: the step of the checkpoint's epoch,
    which the dead attempt had logged at that epoch's end, so the run's chart had two points there (as a
    killed worker's re-run epoch had when its attempt restarted from an older checkpoint)."""
    spec = setup(tmp_path, "twice", analyses={"probe": {"every_n_epochs": 1, "n_samples": 300}})
    units = units_of(spec)
    first, outcome = sweep(spec, units, [KillAfter(2)])
    assert outcome == "killed"
    (run,) = trial_runs(first)
    at_kill = steps(first.tracking_uri, run.info.run_id, "probe/pos_acc")
    assert len(at_kill) == 3                                   # init, epochs 1 and 2
    second, outcome = sweep(spec, units, [])
    assert outcome == "done"
    probe = steps(second.tracking_uri, run.info.run_id, "probe/pos_acc")
    assert probe == sorted(set(probe)) and set(at_kill) < set(probe), (at_kill, probe)
    for metric in ("val/loss", "train/loss"):
        assert steps(second.tracking_uri, run.info.run_id, metric) == [1, 2, 3, 4]


def test_a_lost_fused_group_resumes_each_member_in_its_run(tmp_path, no_tune):
    spec = setup(tmp_path, "lostfused", inits=["xavier", "normal"], execution={"fuse": "always"})
    units = units_of(spec, fused=True)
    first, outcome = sweep(spec, units, [KillAfter(2)])   # the first member's epoch 2 kills the group ...
    assert outcome == "killed"
    # ... so only that member checkpointed epoch 2: members at different epochs train separately
    kept = {r.data.tags[records.KEY_TAG]: r.data.tags.get(records.CHECKPOINT_TAG) for r in trial_runs(first)}
    assert sorted(kept.values()) == ["1", "2"]
    log: list = []
    second, _ = sweep(spec, units, [Record(log)])
    uri = second.tracking_uri
    runs = trial_runs(second)
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    for run in runs:
        resumed = int(run.data.tags[records.RESUMED_TAG])
        assert resumed == int(kept[run.data.tags[records.KEY_TAG]])
        assert steps(uri, run.info.run_id, "val/loss") == [1, 2, 3, 4]
    assert sorted(e[2] for e in log if e[0] == "epoch") == [2, 3, 3, 4, 4]


def test_a_lost_fused_group_at_one_epoch_resumes_fused(tmp_path, no_tune):
    spec = setup(tmp_path, "lostfused2", inits=["xavier", "normal"], execution={"fuse": "always"})
    units = units_of(spec, fused=True)
    last = units[0].trials[-1].key

    def kill_last_member(cfg):  # the last member's epoch end: every member has checkpointed epoch 2
        return [KillAfter(2)] if cfg.key() == last else []
    first, outcome = sweep(spec, units, kill_last_member)
    assert outcome == "killed"
    log: list = []
    second, _ = sweep(spec, units, [Record(log)])
    assert_resumed_in_one_run(second, first.parent_run_id, {i.key for i in units[0].trials}, 2)
    runs = trial_runs(second)
    assert {r.data.tags[records.EXECUTION_TAG] for r in runs} == {"fused"}
    assert sorted(e[2] for e in log if e[0] == "epoch") == [3, 3, 4, 4]


@pytest.mark.parametrize("fused", [False, True], ids=["trial", "fused-group"])
def test_a_retry_without_a_tune_checkpoint_resumes_from_the_folder(tmp_path, tune_session, fused):
    """On a Ray that cannot span machines the epochs' reports carry no checkpoint, so Tune restarts a killed
    attempt with `tune.get_checkpoint()` None: the retry, in the same sweep, resumes from the trial's
    folder after its last epoch, in the same MLflow run, each epoch logged once."""
    spec = setup(tmp_path, f"retry{int(fused)}", **({"inits": ["xavier", "normal"], "execution": {"fuse": "always"}}
                                                     if fused else {}))
    units = units_of(spec, fused=fused)
    keys = {i.key for u in units for i in u.trials}
    last = units[0].trials[-1].key          # its epoch 2 ends after every member's checkpoint of epoch 2
    first, _ = sweep(spec, [], [])       # the sweep: its parent run, its shared settings
    shared = replace(first, one_machine=True)
    assert attempt(shared, units, lambda cfg: [KillAfter(2)] if cfg.key() == last else []) == "killed"
    assert tune_session and all(files is None for _, files in tune_session)   # Tune holds no copy
    log: list = []
    before = len(tune_session)
    assert attempt(shared, units, lambda cfg: [Record(log)]) == "done"        # Tune's retry of the trial
    starts = [e for e in log if e[0] == "start"]
    assert len(starts) == len(keys) and all(step > 0 for _, _, step in starts)   # epoch 2's optimizer steps
    # each Tune trial says at its start where it resumes (the progress table's epoch and best so far),
    # before any epoch's report, with no checkpoint (embinit.sweep.reporting.resumed_report)
    resumed = [(m, files) for m, files in tune_session[before:] if m.get("embinit_resumed")]
    assert len(resumed) == len(units) and tune_session[before][0].get("embinit_resumed")
    for metrics, files in resumed:
        assert (metrics["embinit_epoch"], metrics["embinit_epochs"], files) == (2, 4, None)
        assert "objective" in metrics   # Tune's Optuna searcher reads it from every report
    assert sorted(e[2] for e in log if e[0] == "epoch") == sorted([3, 4] * len(keys))
    runs = trial_runs(shared)
    assert {r.data.tags[records.KEY_TAG] for r in runs} == keys and len(runs) == len(keys)   # no second run
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags[records.RESUMED_TAG] == "2"
        assert steps(shared.tracking_uri, run.info.run_id, "val/loss") == [1, 2, 3, 4]
    # the best so far it resumes with: the lowest val/loss (the selection) of epochs 1-2 (of the group's members)
    kept = [m.value for r in runs for m in mlflow_store.client(shared.tracking_uri).get_metric_history(
        r.info.run_id, "val/loss") if m.step <= 2]
    assert len(units) == 1 and resumed[0][0]["embinit_best"] == pytest.approx(min(kept))


@pytest.mark.parametrize("one_machine, trusted, copied", [(True, True, False), (False, True, True),
                                                          (True, False, True)],
                         ids=["one-machine", "may-span-machines", "temporary-folder"])
def test_reports_carry_the_folder_only_where_a_retry_needs_tune_s_copy(tmp_path, tune_session, monkeypatch,
                                                                       one_machine, trusted, copied):
    """Tune copies the trial's folder (last.pt, best.pt, ...) at each epoch's report only when a retry could
    find it nowhere else: a temporary folder (outside the trusted roots), or a node-local one on a Ray that
    may span machines without a store (tests/test_sweep_storage.py: with one, never)."""
    if not trusted:
        monkeypatch.setenv(TRUSTED_ROOTS_ENV, str(tmp_path / "elsewhere"))
    spec = setup(tmp_path, "copies", tasks=[{**TINY, "epochs": 2}])
    first, _ = sweep(spec, [], [])
    assert attempt(replace(first, one_machine=one_machine), units_of(spec), lambda cfg: []) == "done"
    (key,) = {p.key for p in spec.plan()}
    epochs = [files for metrics, files in tune_session if "embinit_epoch" in metrics]
    assert len(epochs) == 2
    for files in epochs:
        assert (files is not None) == copied
        assert files is None or {f"{key}/last.pt", f"{key}/best.pt", f"{key}/last.json"} <= set(files)


def test_outside_the_trusted_roots_nothing_is_kept(tmp_path, no_tune, monkeypatch):
    monkeypatch.setenv(TRUSTED_ROOTS_ENV, str(tmp_path / "elsewhere"))
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "default-cache"))
    spec = setup(tmp_path, "untrusted")
    first, outcome = sweep(spec, units_of(spec), [KillAfter(1)])
    assert outcome == "killed"
    assert not trial_folders.checkpoint_root(spec.cache_dir).exists()   # no pickle written outside the roots
    (run,) = trial_runs(first)
    assert records.CHECKPOINT_TAG not in run.data.tags           # so it does not claim to be resumable


def test_two_specs_sharing_a_key_train_it_once(tmp_path, no_tune):
    """Two different specs in one MLflow experiment, at the same time: the shared key (xavier, seed 0)
    is claimed by one; the other waits, then reuses its finished run."""
    two_specs_share_a_key(tmp_path, sweep)


def two_specs_share_a_key(tmp_path, run, a_over: dict | None = None, b_over: dict | None = None) -> None:
    """Sweeps two specs sharing one key at once with `run` (a `sweep`); the key must be trained once.
    `a_over`/`b_over`: more spec fields (another node's `cache_dir`, in test_sweep_storage)."""
    shared_exp = {"experiment": "shared-keys", "tracking_uri": f"sqlite:///{tmp_path}/m.db", "log_plots": False}
    a = setup(tmp_path, "spec-a", mlflow=shared_exp, tasks=[{**TINY, "epochs": 2}], **(a_over or {}))
    b = setup(tmp_path, "spec-b", mlflow=shared_exp, tasks=[{**TINY, "epochs": 2}], inits=["normal", "xavier"],
              **(b_over or {}))
    common = {p.key for p in a.plan()} & {p.key for p in b.plan()}
    assert len(common) == 1
    mlflow_store.ensure_experiment("shared-keys", mlflow_store.resolve_uri(shared_exp["tracking_uri"]))
    log: list = []
    results: dict[str, str] = {}
    threads = [threading.Thread(target=lambda s=s: results.update({s.name: run(s, units_of(s), [Record(log)])[1]}))
               for s in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert results == {"spec-a": "done", "spec-b": "done"}
    uri = mlflow_store.resolve_uri(shared_exp["tracking_uri"])
    runs = [r for r in mlflow_store.search_runs(mlflow_store.experiment_id("shared-keys", uri), uri)
            if records.KEY_TAG in r.data.tags]
    by_key: dict[str, list] = {}
    for r in runs:
        by_key.setdefault(r.data.tags[records.KEY_TAG], []).append(r.info.status)
    assert by_key[next(iter(common))] == ["FINISHED"]             # trained once, by one of the two
    assert len(by_key) == 2 and all(v == ["FINISHED"] for v in by_key.values())
    assert [e[1] for e in log if e[0] == "start"].count("xavier") == 1


def test_a_second_claim_waits_for_the_first(tmp_path):
    shared = SweepContext("sqlite:///x.db", "1", "p", cache_dir=str(tmp_path))
    entered, release, order = threading.Event(), threading.Event(), []

    def first():
        with resume.claim(shared, "k") as c:
            (c.path / "last.json").write_text("{}")  # something to keep: the folder and lock stay
            entered.set()
            release.wait(10)
            order.append("first out")

    def second():
        with resume.claim(shared, "k"):
            order.append("second in")
    t1 = threading.Thread(target=first)
    t1.start()
    assert entered.wait(10)
    t2 = threading.Thread(target=second)
    t2.start()
    time.sleep(0.5)
    assert order == []                                            # still waiting for the first
    release.set()
    t1.join(10)
    t2.join(10)
    assert order == ["first out", "second in"]


def test_tune_s_restored_copy_replaces_the_folder_only_when_newer(tmp_path):
    """A worker Tune restarted (maybe on a node without the folder) takes Tune's checkpoint of the key
    only when it holds a later epoch than the folder."""
    shared = SweepContext("sqlite:///x.db", "1", "p", cache_dir=str(tmp_path / "c"))

    def fake_last(folder: Path, epoch: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "last.pt").write_text(f"epoch {epoch}")
        (folder / "last.json").write_text(f'{{"key": "k", "epoch": {epoch}}}')
    restored = tmp_path / "restored"
    fake_last(restored / "k", 3)
    with resume.claim(shared, "k", restored) as c:       # no folder yet (another node): Tune's copy
        assert (c.path / "last.pt").read_text() == "epoch 3"
        fake_last(c.path, 5)
    with resume.claim(shared, "k", restored) as c:       # the folder is newer: kept
        assert (c.path / "last.pt").read_text() == "epoch 5"
        fake_last(restored / "k", 6)
    with resume.claim(shared, "k", restored) as c:       # Tune's copy is newer: taken
        assert (c.path / "last.pt").read_text() == "epoch 6"


def test_a_resumable_run_stands_for_its_key_over_a_newer_failure():
    kept = records.TrialRecord("old", "k", "t", "L", "failed", start_ms=1, resume_epoch=3)
    fresh = records.TrialRecord("new", "k", "t", "L", "failed", start_ms=2)
    assert records.by_key([kept, fresh])["k"].run_id == "old"
    done = records.TrialRecord("done", "k", "t", "L", "finished", start_ms=0)
    assert records.by_key([kept, fresh, done])["k"].run_id == "done"


# ---- a real crash: SIGKILL to the driver process and its local Ray -----------------------------------------

DRIVER = """
import sys, time
from pathlib import Path
from embinit.spec import load_spec
from embinit.sweep import run_sweep

class Hang:  # after epoch 2 (checkpointed and logged) of the first attempt: wait to be killed
    def __init__(self, marker):
        self.marker = Path(marker)
    def on_train_start(self, ctx):
        with open(self.marker.with_suffix('.starts'), 'a') as f:
            f.write(f'{ctx.step}\\n')
    def on_epoch_end(self, ctx, epoch, metrics):
        if epoch == 2 and not self.marker.exists():
            self.marker.write_text('hanging')
            time.sleep(600)

spec, marker = load_spec(sys.argv[1]), sys.argv[2]  # bound here: a worker's sys.argv is its own
result = run_sweep(spec, progress=False, extra_callbacks=lambda cfg, m=marker: [Hang(m)])
print('FINISHED', result.n_finished, result.planned)
"""


def test_a_killed_driver_and_ray_resume_the_trial_when_the_spec_runs_again(tmp_path):
    import yaml
    spec_file = tmp_path / "spec.yaml"
    data = sweep_spec_data("killed", tmp_path, TINY, mlflow={"tracking_uri": f"sqlite:///{tmp_path}/m.db",
                                                             "log_plots": False, "log_checkpoint": False})
    spec_file.write_text(yaml.safe_dump(data))
    (tmp_path / "driver.py").write_text(DRIVER)
    marker = tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, str(tmp_path / "driver.py"), str(spec_file), str(marker)]
    out = tmp_path / "first.log"   # a file, not a pipe: a full pipe would stall the driver
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert marker.exists(), out.read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its local Ray and the trial: gone at once
        proc.wait(timeout=60)
    uri = mlflow_store.resolve_uri(data["mlflow"]["tracking_uri"])
    exp_id = mlflow_store.experiment_id("killed", uri)
    (run,) = [r for r in mlflow_store.search_runs(exp_id, uri) if records.KEY_TAG in r.data.tags]
    assert run.info.status == "RUNNING" and steps(uri, run.info.run_id, "val/loss") == [1, 2]
    (dead,) = [r for r in mlflow_store.search_runs(exp_id, uri) if records.KEY_TAG not in r.data.tags]
    stale = build_report("killed", uri).stale   # the report says that nothing trains it
    assert [t["run_id"] for t in stale] == [run.info.run_id] and "driver (pid " in stale[0]["why"]

    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert "FINISHED 1 1" in again.stdout, again.stdout + again.stderr
    starts = [int(x) for x in marker.with_suffix(".starts").read_text().split()]
    assert len(starts) == 2 and starts[0] == 0 and starts[1] > 0   # the rerun did not start from epoch 0
    runs = [r for r in mlflow_store.search_runs(exp_id, uri) if records.KEY_TAG in r.data.tags]
    assert [r.info.run_id for r in runs] == [run.info.run_id]    # one run stands for the key: the same
    (done,) = runs
    assert done.info.status == "FINISHED" and done.data.tags[records.RESUMED_TAG] == "2"
    assert steps(uri, run.info.run_id, "val/loss") == [1, 2, 3, 4]
    left = {r.info.run_id: r.info.status for r in mlflow_store.search_runs(exp_id, uri)}
    assert "RUNNING" not in left.values(), left   # before: the dead sweep's run stayed RUNNING for ever
    closed = mlflow_store.client(uri).get_run(dead.info.run_id)
    assert (closed.info.status, closed.data.tags[records.STATUS_TAG]) == ("KILLED", "interrupted")


def test_one_store_spelled_two_ways_has_one_experiment_folder(tmp_path):
    """`--tracking-uri sqlite:////data/m.db` and the same file through a symlink (or with `./`): two runs of
    one spec at once trained every key twice (8 FINISHED runs for 4 keys, measured), each blind to the
    other's claims, and a rerun spelled the other way restarted its interrupted trials from epoch 0."""
    tmp_path = tmp_path.resolve()
    (tmp_path / "store").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "store")
    canonical = f"sqlite:///{tmp_path}/store/m.db"
    spellings = [canonical, f"sqlite:///{tmp_path}/link/m.db", f"sqlite:///{tmp_path}/store/./m.db",
                 f"sqlite:///{tmp_path}//store/m.db"]
    folders = {resume.experiment_folder(SweepContext(uri, "1", "p", cache_dir=str(tmp_path))) for uri in spellings}
    assert len(folders) == 1
    # a URI already canonical keeps the folder it had: checkpoints kept before this change still resume
    digest = hashlib.sha256(f"{canonical}\0{1}".encode()).hexdigest()[:12]
    assert folders.pop().name == f"1-{digest}"
    server = SweepContext("http://127.0.0.1:5000", "1", "p", cache_dir=str(tmp_path))
    assert trial_folders.store_identity(server.tracking_uri) == "http://127.0.0.1:5000"


@pytest.mark.parametrize("where", ["outputs", "run id", "fused outputs"])
def test_a_full_disk_after_the_run_opened_is_recorded_in_the_run(tmp_path, no_tune, monkeypatch, where):
    """A sweep whose checkpoint disk filled up: the trial raised OSError (ENOSPC) writing its outputs, or
    its folder's run id just after opening its run; that run stayed RUNNING without the error and was
    closed by the sweep as "the trial did not finish: its worker died more often than `retries` allows",
    the cause in Tune's log alone. The run is closed FAILED with the error; a retry reopens it."""
    import errno
    from embinit.sweep import fused, trainable

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    if where == "run id":
        monkeypatch.setattr(resume.Claim, "sync", full)
    else:
        monkeypatch.setattr(fused if where.startswith("fused") else trainable, "artifacts", full)
    spec = setup(tmp_path, f"full-{where.replace(' ', '-')}", mlflow={"tracking_uri": f"sqlite:///{tmp_path}/m.db",
                                                                      "log_plots": False})
    units = units_of(spec, fused=where.startswith("fused"))
    with pytest.raises(OSError, match="No space left"):
        sweep(spec, units, [])
    (run,) = trial_runs_of(spec)
    assert run.info.status == "FAILED", run.data.tags
    assert "No space left on device" in run.data.tags[records.ERROR_TAG]
    monkeypatch.undo()
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: None)
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    sweep(spec, units, [])
    runs = trial_runs_of(spec)
    assert [r.info.status for r in runs] == ["FINISHED"]


def trial_runs_of(spec) -> list:
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    exp_id = mlflow_store.experiment_id(spec.experiment_name(), uri)
    return [r for r in mlflow_store.search_runs(exp_id, uri) if records.KEY_TAG in r.data.tags]
