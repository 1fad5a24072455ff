"""The object store's copies of trial folders a spec no longer plans (embinit.sweep.store_copies), against a
real S3 server (moto's): the dry run counts the spec's own with their sizes from the store's listing, and
`embinit run SPEC --prune-checkpoints` removes them, also those of keys that trained on another node (no
folder on this one), each under its key's lease; never one whose lease a live process holds, nor another
spec's or a key no run names. A store that cannot be listed is an error before anything is removed."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess

import pytest

from embinit.checkpoint_files import LAST, LAST_INFO, last_info_text
from embinit.cli import main
from embinit.cli.dry_run import dry_run
from embinit.spec import load_spec
from embinit.storage import STORAGE_ENV, Store
from embinit.sweep import store_copies, trial_folders
from embinit.sweep.claims import Lease
from embinit.tracking import mlflow_store, run_readers
from embinit.tracking.records import CHECKPOINT_TAG
from helpers.s3 import objects, use_store
from test_trial_folders import _folder, _interrupted

pytestmark = pytest.mark.slow   # an S3 server in a thread, MLflow SQLite stores


@pytest.fixture
def store(endpoint, monkeypatch) -> Store:
    return Store.from_uri(use_store(monkeypatch, endpoint))


def _copy(store: Store, folder: str, key: str, epoch: int | None, size: int) -> None:
    """A trial folder's copy as `Mirror.push` leaves it: last.pt of `size` bytes, last.json naming its epoch."""
    put = store.client().put_object
    put(Bucket=store.bucket, Key=store.key("checkpoints", folder, key, LAST), Body=b"\0" * size)
    if epoch is not None:
        put(Bucket=store.bucket, Key=store.key("checkpoints", folder, key, LAST_INFO),
            Body=last_info_text(key, epoch).encode())


def _info(key: str) -> int:
    return len(last_info_text(key, 1).encode())


def test_copies_are_sized_by_the_listing_and_removed_under_their_key_s_lease(tmp_path, store):
    node = tmp_path / "exp-1"   # this node's folder of the experiment
    for key, epoch, size in [("planned", 1, 10), ("old", 2, 3000), ("early", None, 10), ("busy", 1, 10),
                             ("locked", 1, 10), ("lapsed", 1, 10)]:
        _copy(store, "exp-1", key, epoch, size)
    _folder(node, "old", 2)
    live = Lease(store, "exp-1/busy").acquire()   # a trial training that key on another node
    held = os.open(node / "locked.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)             # ... and one training on this node
    dead = subprocess.Popen(["true"])
    dead.wait()                                  # a holder of this host that no longer runs: its lease lapsed
    store.client().put_object(Bucket=store.bucket, Key=store.key("claims", "exp-1", "lapsed.lease"), Body=b"{}",
                              Metadata={"holder": f"{socket.gethostname()}:{dead.pid}"})
    try:
        found = store_copies.retired(store, "exp-1", {"planned"}, node)
        assert [(c.key, c.size, c.epoch, c.held, c.local) for c in found] == [
            ("busy", 10 + _info("busy"), 1, True, False), ("early", 10, None, False, False),
            ("lapsed", 10 + _info("lapsed"), 1, False, False), ("locked", 10 + _info("locked"), 1, True, False),
            ("old", 3000 + len(last_info_text("old", 2).encode()), 2, False, True)]
        done = store_copies.prune(store, "exp-1", found, node)
        assert [c.key for c in done.removed] == ["early", "lapsed", "old"], done
        assert [c.key for c in done.held] == ["busy", "locked"] and done.failed == []
        assert objects(store.uri) == ["checkpoints/exp-1/busy/last.json", "checkpoints/exp-1/busy/last.pt",
                                      "checkpoints/exp-1/locked/last.json", "checkpoints/exp-1/locked/last.pt",
                                      "checkpoints/exp-1/planned/last.json", "checkpoints/exp-1/planned/last.pt",
                                      "claims/exp-1/busy.lease"]   # the prune's leases are released
        assert (node / "old" / LAST).is_file()   # the node's folder is trial_folders.prune's
    finally:
        live.release()
        os.close(held)
    assert [(c.key, c.held) for c in store_copies.retired(store, "exp-1", {"planned"}, node)] == [
        ("busy", False), ("locked", False)]


def _specs(tmp_path):
    """An edited spec (its 3 interrupted trials' keys retired), its spec file, the trials before and after
    the edit, another spec's interrupted trial in the same experiment, the store and the experiment."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    raw = {"name": "edited", "tasks": [{"task": "synthetic_translation", "epochs": 2}], "inits": ["xavier"],
           "seeds": 3, "mlflow": {"tracking_uri": uri, "experiment": "shared"}, "cache_dir": str(tmp_path / "cache")}
    before = load_spec(raw)
    raw["tasks"][0]["epochs"] = 3
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(raw))
    spec = load_spec(raw)
    other = load_spec({**raw, "name": "other", "tasks": [{"task": "synthetic_translation", "epochs": 4}]})
    exp = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    for p in before.plan():
        _interrupted(uri, exp, before, p)
    (theirs, *_) = other.plan()
    _interrupted(uri, exp, other, theirs)
    return spec, path, before.plan(), spec.plan(), theirs, uri, exp


def test_prune_removes_the_spec_s_own_store_copies_also_of_keys_trained_on_another_node(tmp_path, store, capsys):
    spec, path, (a, b, c), (new, *_), theirs, uri, exp = _specs(tmp_path)
    base = trial_folders.experiment_folder(spec.cache_dir, uri, exp)
    folder, where = base.name, f"{store.uri}/checkpoints/{base.name}"
    _folder(base, a.key, 1, size=2_500_000)      # trained here: a folder and its copy
    _copy(store, folder, a.key, 1, 2_000_000)
    _copy(store, folder, b.key, 2, 1_000_000)    # trained on another node: a copy only
    _copy(store, folder, c.key, 1, 500_000)      # in use on another node: its lease is live
    _copy(store, folder, new.key, 1, 100)        # planned: the run resumes it
    _copy(store, folder, theirs.key, 3, 4_000_000)
    _copy(store, folder, "no-run", 1, 1_000_000)  # no run in the tracking store names it
    live = Lease(store, f"{folder}/{c.key}").acquire()
    runs = {p.key: run_readers.key_records(exp, uri, p.key)[0].run_id for p in (a, b, c)}
    for run_id in runs.values():   # each kept a checkpoint after epoch 1: a rerun would resume it
        mlflow_store.client(uri).set_tag(run_id, CHECKPOINT_TAG, "1")

    def resumes() -> dict[str, int | None]:
        return {k: run_readers.key_records(exp, uri, k)[0].resume_epoch for k in runs}
    try:
        text = dry_run(spec, uri)
        assert f"note: 1 checkpoint folder (2.5 MB) in {base} belongs to trials this spec no longer plans" in text
        assert (f"note: 2 store copies (3.0 MB) of checkpoint folders in {where} belong to trials this spec no "
                "longer plans (1 with no folder on this node): nothing resumes them; `embinit run SPEC "
                "--prune-checkpoints` removes them") in text, text
        assert (f"note: 2 store copies (5.0 MB) of trials of other specs sharing the experiment ('other') or that "
                f"no run in the tracking store names in {where}: the prune leaves them") in text, text

        assert main(["run", str(path), "--prune-checkpoints"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"removed 1 checkpoint folder (2.5 MB) of trials the spec no longer plans, from "
                              f"{base}:\n  {a.key}     2.5 MB  after epoch 1\n"), out
        assert (f"removed 2 store copies (3.0 MB) of checkpoint folders of trials the spec no longer plans, from "
                f"{where}:") in out, out
        assert f"  {a.key}     2.0 MB  after epoch 1\n" in out, out
        assert f"  {b.key}     1.0 MB  after epoch 2  (no folder on this node)\n" in out, out
        assert (f"left 1 store copy whose key another process holds (its lease is live, or its lock on this "
                f"node): {c.key}") in out, out
        assert (f"left 2 store copies (5.0 MB) of trials of other specs sharing the experiment ('other') or that "
                f"no run in the tracking store names in {where}") in out, out
        left = objects(store.uri)
        assert {o.split("/")[2] for o in left if o.startswith("checkpoints/")} == {
            c.key, new.key, theirs.key, "no-run"}, left
        assert [o for o in left if o.startswith("claims/")] == [f"claims/{folder}/{c.key}.lease"]   # released
        assert not (base / a.key).exists()
        # a key with nothing left to resume from no longer says it resumes; the held key's copy is still there
        assert resumes() == {a.key: None, b.key: None, c.key: 1}
    finally:
        live.release()
    assert main(["run", str(path), "--prune-checkpoints"]) == 0   # the key is free now: its copy goes
    out = capsys.readouterr().out
    assert out.startswith(f"removed 1 store copy (500.0 kB) of checkpoint folders of trials the spec no longer "
                          f"plans, from {where}:\n  {c.key}   500.0 kB  after epoch 1  (no folder on this node)"), out
    assert resumes() == {a.key: None, b.key: None, c.key: None}
    assert main(["run", str(path), "--prune-checkpoints"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"no checkpoint folder of experiment 'shared' (on this node or in the store, {where}) "
                          "belongs to a trial the spec no longer plans\n"), out
    assert "no longer plans" not in dry_run(spec, uri).replace("the prune leaves", "")


@pytest.mark.parametrize("setting, problem", [
    ("s3://embinit-no-such-bucket/x", "the object store s3://embinit-no-such-bucket/x (EMBINIT_STORAGE_URI) "
                                      "cannot be listed at s3://embinit-no-such-bucket/x/checkpoints/"),
    ("/shared/checkpoints", "EMBINIT_STORAGE_URI='/shared/checkpoints' is not an S3 location")])
def test_a_store_that_cannot_be_read_removes_nothing(tmp_path, store, monkeypatch, capsys, setting, problem):
    spec, path, (a, *_), _, _, uri, exp = _specs(tmp_path)
    base = trial_folders.experiment_folder(spec.cache_dir, uri, exp)
    _folder(base, a.key, 1)
    monkeypatch.setenv(STORAGE_ENV, setting)
    assert main(["run", str(path), "--prune-checkpoints"]) == 2
    err = capsys.readouterr().err
    assert problem in err and err.rstrip().endswith("; nothing was removed"), err
    assert (base / a.key / LAST).is_file()
    text = dry_run(spec, uri)   # the plan is still worth printing: the store is a note
    assert "note: 1 checkpoint folder" in text and f"note: {problem}" in text, text
    assert "its copies of trial folders are not counted here" in text, text


def test_a_copy_the_store_keeps_after_the_delete_is_an_error_that_names_it(tmp_path, store, monkeypatch, capsys):
    spec, path, (a, *_), _, _, uri, exp = _specs(tmp_path)
    folder = trial_folders.experiment_folder(spec.cache_dir, uri, exp).name
    _copy(store, folder, a.key, 1, 1000)
    # S3's multi-object delete answers a refused object (AccessDenied) in its body, raising nothing
    monkeypatch.setattr(store_copies.Mirror, "clear", lambda self: None)
    assert main(["run", str(path), "--prune-checkpoints"]) == 2
    err = capsys.readouterr().err
    assert (f"could not remove the store copy of {a.key} (1.0 kB): objects of it remain after the delete"
            in err), err
    assert f"checkpoints/{folder}/{a.key}/last.pt" in objects(store.uri)
    assert not [o for o in objects(store.uri) if o.startswith("claims/")]   # its lease released all the same
