"""Checkpoint folders of trials a spec no longer plans (embinit.sweep.trial_folders): an interrupted trial's
folder outlives its key when the spec is edited (`epochs: 2` -> `3`); the dry run counts those folders and
`embinit run SPEC --prune-checkpoints` removes them, never a planned trial's folder (the run resumes it) nor
one a running trial holds (its `<key>.lock`)."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from embinit.checkpoint_files import LAST, LAST_INFO, last_info_text
from embinit.cli import main
from embinit.cli import dry_run_store
from embinit.cli.dry_run import dry_run
from embinit.spec import load_spec
from embinit.sweep import trial_folders
from embinit.tracking import mlflow_store, run_writers, trial_run


def _folder(base: Path, key: str, epoch: int | None, size: int = 1000) -> Path:
    """A trial folder as the trainer leaves it: last.pt of `size` bytes and last.json naming its epoch."""
    path = base / key
    path.mkdir(parents=True)
    (path / LAST).write_bytes(b"\0" * size)
    if epoch is not None:
        (path / LAST_INFO).write_text(last_info_text(key, epoch))
    return path


def _interrupted(uri: str, exp: str, spec, planned) -> None:
    """A run of trial `planned` in a sweep of `spec` (named as the spec), left unfinished."""
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), spec.num_trials(),
                                          run_name=spec.name)
    run = trial_run.TrialRun.open(uri, exp, parent, planned.config, planned.key, planned.label,
                                  {"axes": planned.axes, "point": planned.point})
    run.fail("interrupted", status="KILLED")


def test_retired_folders_are_the_unplanned_ones_no_process_holds(tmp_path):
    base = tmp_path / "exp"
    _folder(base, "planned", 2)
    _folder(base, "old", 1, size=3000)
    _folder(base, "early", None, size=10)   # stopped before its first epoch ended
    _folder(base, "busy", 4)
    (base / "link").symlink_to(base / "old")
    held = os.open(base / "busy.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)   # a trial training that key
    try:
        found = trial_folders.retired(base, {"planned"})
        info = len(last_info_text("old", 1).encode())
        assert [(r.key, r.size, r.epoch) for r in found] == [("early", 10, None), ("old", 3000 + info, 1)]
        removed, skipped = trial_folders.prune(found)
        assert [r.key for r in removed] == ["early", "old"] and skipped == []
        assert sorted(p.name for p in base.iterdir()) == ["busy", "busy.lock", "link", "planned"]
        assert trial_folders.retired(base, {"planned"}) == []
    finally:
        os.close(held)
    assert [r.key for r in trial_folders.retired(base, {"planned"})] == ["busy"]   # released: retired now
    assert trial_folders.retired(tmp_path / "absent", set()) == []


def test_prune_leaves_a_folder_a_trial_took_after_the_listing(tmp_path):
    base = tmp_path / "exp"
    _folder(base, "old", 1)
    found = trial_folders.retired(base, set())
    held = os.open(base / "old.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        removed, skipped = trial_folders.prune(found)
    finally:
        os.close(held)
    assert removed == [] and [r.key for r in skipped] == ["old"] and (base / "old" / LAST).is_file()


@pytest.mark.slow   # an MLflow store
def test_the_dry_run_counts_an_edited_spec_s_old_folders_and_prune_removes_only_those(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    raw = {"name": "edited", "tasks": [{"task": "synthetic_translation", "epochs": 2}], "inits": ["xavier"],
           "seeds": 1, "mlflow": {"tracking_uri": uri, "experiment": "shared"}, "cache_dir": str(tmp_path / "cache")}
    before = load_spec(raw)
    (old,) = before.plan()
    raw["tasks"][0]["epochs"] = 3   # the spec edited after its trial was interrupted at epoch 1
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(raw))
    spec = load_spec(raw)
    (new,) = spec.plan()
    # another spec logging to the same experiment, interrupted too: its rerun resumes its folder
    other = load_spec({**raw, "name": "other", "tasks": [{"task": "synthetic_translation", "epochs": 4}]})
    (theirs,) = other.plan()
    exp = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    _interrupted(uri, exp, before, old)
    _interrupted(uri, exp, other, theirs)
    base = trial_folders.experiment_folder(spec.cache_dir, uri, exp)
    _folder(base, old.key, 1, size=2_500_000)
    _folder(base, new.key, 2)
    _folder(base, theirs.key, 3, size=4_000_000)
    _folder(base, "no-run", 1, size=1_000_000)   # no run in the store names it (deleted from MLflow)

    text = dry_run(spec, uri)
    assert (f"note: 1 checkpoint folder (2.5 MB) in {base} belongs to trials this spec no longer plans "
            "(interrupted before the spec was edited): nothing resumes them; `embinit run SPEC "
            "--prune-checkpoints` removes them") in text, text
    assert (f"note: 2 checkpoint folders (5.0 MB) of trials of other specs sharing the experiment ('other') or "
            f"that no run in this store names in {base}: the prune leaves them") in text, text
    assert main(["run", str(path), "--dry-run"]) == 0
    assert f"{path} --prune-checkpoints` removes them" in capsys.readouterr().out   # the command as run

    assert main(["run", str(path), "--prune-checkpoints"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"removed 1 checkpoint folder (2.5 MB) of trials the spec no longer plans, from {base}:")
    assert f"  {old.key}     2.5 MB  after epoch 1" in out, out
    assert "left 2 checkpoint folders (5.0 MB) of trials of other specs sharing the experiment" in out, out
    assert not (base / old.key).exists() and (base / new.key / LAST).is_file()   # the planned one: resumed
    assert (base / theirs.key / LAST).is_file() and (base / "no-run" / LAST).is_file()
    assert "no longer plans" not in dry_run(spec, uri)
    assert main(["run", str(path), "--prune-checkpoints"]) == 0
    out = capsys.readouterr().out
    assert "no checkpoint folder of experiment 'shared' belongs to a trial" in out and "left 2" in out, out


@pytest.mark.slow   # an MLflow store
def test_a_key_another_spec_also_ran_is_not_retired_by_this_one(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    raw = {"name": "a", "tasks": [{"task": "synthetic_translation", "epochs": 2}], "inits": ["xavier"],
           "seeds": 1, "mlflow": {"tracking_uri": uri, "experiment": "shared"}, "cache_dir": str(tmp_path / "cache")}
    a, b = load_spec(raw), load_spec({**raw, "name": "b"})
    (shared,) = a.plan()   # both specs plan this very trial
    exp = mlflow_store.ensure_experiment("shared", uri)
    _interrupted(uri, exp, a, shared)
    _interrupted(uri, exp, b, shared)
    base = trial_folders.experiment_folder(a.cache_dir, uri, exp)
    _folder(base, shared.key, 1)
    edited = load_spec({**raw, "tasks": [{"task": "synthetic_translation", "epochs": 3}]})   # a, edited
    folders = dry_run_store.retired_folders(edited, edited.plan(), exp, uri)
    assert folders.retired == [] and [r.key for r in folders.others] == [shared.key]
    assert folders.owners == {shared.key: {"a", "b"}}
    b_edited = load_spec({**raw, "name": "b", "tasks": [{"task": "synthetic_translation", "epochs": 5}]})
    assert dry_run_store.retired_folders(b_edited, b_edited.plan(), exp, uri).retired == []   # a ran it too


def test_prune_refuses_a_search_whose_trials_are_drawn(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({
        "name": "drawn", "tasks": [{"task": "synthetic_translation", "epochs": 1}], "inits": ["xavier"], "seeds": 1,
        "mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db"},
        "search": {"method": "optuna", "num_samples": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}}}))
    assert main(["run", str(path), "--prune-checkpoints"]) != 0
    assert "an Optuna search draws its trials while it runs" in capsys.readouterr().err


@pytest.mark.slow   # an MLflow store
def test_pruned_trials_runs_no_longer_say_a_rerun_resumes_them(tmp_path, capsys):
    # found in an acceptance run: after --prune-checkpoints, the spec's edit reverted, the dry run still
    # said "[interrupted after epoch 2: the run resumes it from its checkpoint]" of a folder that was gone
    from embinit.tracking.records import CHECKPOINT_TAG
    from embinit.tracking.run_readers import key_records
    from helpers.sweep import interrupted_after_epoch
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    raw = {"name": "edited", "tasks": [{"task": "synthetic_translation", "epochs": 2}], "inits": ["xavier"],
           "seeds": 1, "mlflow": {"tracking_uri": uri}, "cache_dir": str(tmp_path / "cache")}
    before = load_spec(raw)
    exp, old, run = interrupted_after_epoch(uri, before, 1)   # interrupted after its first epoch
    (rec,) = key_records(exp, uri, old.key)   # a rerun's resuming is said once, with the epoch it continues after
    assert rec.error == ("interrupted (Ctrl-C); running the same spec again resumes: finished trials are reused, "
                         "and this run continues from its checkpoint after epoch 1")
    base = trial_folders.experiment_folder(before.cache_dir, uri, exp)
    _folder(base, old.key, 1)
    assert "[interrupted after epoch 1: the run resumes it from its checkpoint]" in dry_run(before, uri)

    raw["tasks"][0]["epochs"] = 3   # the spec edited, its old trial's folder pruned, then the edit reverted
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(raw))
    assert main(["run", str(path), "--prune-checkpoints"]) == 0
    assert f"  {old.key}" in capsys.readouterr().out and not (base / old.key).exists()
    text = dry_run(before, uri)
    assert "resumes it from its checkpoint" not in text and "resume from a checkpoint" not in text, text
    (rec,) = key_records(exp, uri, old.key)
    assert rec.status == "interrupted" and rec.resume_epoch is None
    assert rec.error == ("interrupted (Ctrl-C); running the same spec again resumes: finished trials are reused; its "
                         "checkpoint folder was removed (--prune-checkpoints): running the spec again starts it over")
    assert CHECKPOINT_TAG not in mlflow_store.client(uri).get_run(run.run_id).data.tags


def test_prune_against_a_tracking_server_that_does_not_answer_says_so(tmp_path, capsys):
    from live_server import free_port
    uri = f"http://127.0.0.1:{free_port()}"
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"name": "p", "tasks": [{"task": "synthetic_translation", "epochs": 1}],
                                "inits": ["xavier"], "seeds": 1, "mlflow": {"tracking_uri": uri}}))
    assert main(["run", str(path), "--prune-checkpoints"]) != 0
    err = capsys.readouterr().err
    assert f"{uri} cannot be read here: the MLflow server {uri} cannot be reached" in err, err
    assert err.rstrip().endswith("nothing was removed"), err
