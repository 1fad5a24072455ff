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
from embinit.cli.dry_run import dry_run
from embinit.spec import load_spec
from embinit.sweep import trial_folders
from embinit.tracking import mlflow_store


def _folder(base: Path, key: str, epoch: int | None, size: int = 1000) -> Path:
    """A trial folder as the trainer leaves it: last.pt of `size` bytes and last.json naming its epoch."""
    path = base / key
    path.mkdir(parents=True)
    (path / LAST).write_bytes(b"\0" * size)
    if epoch is not None:
        (path / LAST_INFO).write_text(last_info_text(key, epoch))
    return path


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
           "seeds": 1, "mlflow": {"tracking_uri": uri}, "cache_dir": str(tmp_path / "cache")}
    (old,) = load_spec(raw).plan()
    raw["tasks"][0]["epochs"] = 3   # the spec edited after its trial was interrupted at epoch 1
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(raw))
    spec = load_spec(raw)
    (new,) = spec.plan()
    exp = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    base = trial_folders.experiment_folder(spec.cache_dir, uri, exp)
    _folder(base, old.key, 1, size=2_500_000)
    _folder(base, new.key, 2)

    text = dry_run(spec, uri)
    assert (f"note: 1 checkpoint folder (2.5 MB) in {base} belongs to trials this spec no longer plans "
            "(interrupted before the spec was edited): nothing resumes them; `embinit run SPEC "
            "--prune-checkpoints` removes them") in text, text
    assert main(["run", str(path), "--dry-run"]) == 0
    assert f"{path} --prune-checkpoints` removes them" in capsys.readouterr().out   # the command as run

    assert main(["run", str(path), "--prune-checkpoints"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"removed 1 checkpoint folder (2.5 MB) of trials the spec no longer plans, from {base}:")
    assert f"  {old.key}     2.5 MB  after epoch 1" in out, out
    assert not (base / old.key).exists() and (base / new.key / LAST).is_file()   # the planned one: resumed
    assert "no longer plans" not in dry_run(spec, uri)
    assert main(["run", str(path), "--prune-checkpoints"]) == 0
    assert "no checkpoint folder of experiment 'edited' belongs to a trial" in capsys.readouterr().out


def test_prune_refuses_a_search_whose_trials_are_drawn(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({
        "name": "drawn", "tasks": [{"task": "synthetic_translation", "epochs": 1}], "inits": ["xavier"], "seeds": 1,
        "mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db"},
        "search": {"method": "optuna", "num_samples": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}}}))
    assert main(["run", str(path), "--prune-checkpoints"]) != 0
    assert "an Optuna search draws its trials while it runs" in capsys.readouterr().err
