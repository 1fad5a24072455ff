"""Trial folders that outlive their sweep: per trial key a checkpoint folder that a rerun resumes
from, and a claim on the key while it trains.

A trial of key K, tracked in MLflow experiment E, trains in `<root>/checkpoints/<E's folder>/<K>/`, where
root is the spec's `cache_dir` (else `$EMBINIT_CACHE_DIR`, else `~/.cache/embinit`; the paths:
embinit.sweep.trial_folders, which also finds the folders a spec no longer plans). The folder holds the
trainer's `last.pt`, `last.json` and `best.pt` and `mlflow_run_id`, the run the trial logs into. It
outlives the worker, the Ray session and the driver: when the spec runs again (after the whole local Ray
or the API died), the trial finds the folder, reopens that MLflow run and the trainer continues after the
checkpoint's epoch. The folder is removed once the run is finished (or failed with a user error, which
fails the same way again).

While a trial trains it holds a claim on its key. A second sweep reaching the same key (another spec
sharing it, in the same MLflow experiment) waits for it, then finds the finished run in MLflow and reuses
it: the key is not trained twice. Without an object store the claim is an exclusive lock (flock) on
`<K>.lock` beside the folder (a killed process holds no lock), which holds between sweeps that share the
folder: one machine and one root, or a shared file system whose locks work. With the operator's object
store (`SweepContext.storage`, embinit.storage) it is a lease in the store (embinit.sweep.claims), with
the same flock taken on the node after it (so a look at the node's folders sees the key in use), and
the folder is mirrored there at every epoch end (`Claim.sync`) and fetched from there when the node's
copy is older or missing: both hold across nodes that share no disk.

The folder holds pickles the trainer loads, so it is used only inside the trusted roots
(embinit.trusted); elsewhere the trial trains in a temporary folder, as before, and cannot resume once its
sweep is gone.

Ray Tune's own checkpoint (`tune_checkpoint`: the folder staged with hard links, which Tune copies into
its storage at every report) is kept only where nothing else carries the folder to a restarted attempt:
a temporary folder (outside the trusted roots: gone with its worker), or a node-local folder on a Ray
that may span machines without a store (a retry on another node finds no folder there; Tune's storage
must then be shared, docs/deployment.md). With the store the mirror carries the folder to any node, and
on a Ray that cannot span machines (`SweepContext.one_machine`: embinit's local Ray) every retry runs
where the folder is; there the reports carry no checkpoint, Tune restarts a killed attempt with
`tune.get_checkpoint()` None, and the attempt resumes from the folder (or the store's copy) after its
last epoch. That copy cost a trial 27 MB of writes per epoch at D=50 and 194 MB at D=300 (Multi30k's
vocabularies), and 20 ms and 90-140 ms in the report call (docs/benchmarks.md,
bench/bench_tune_checkpoint.py). When Tune does restore a trial, the restored copy replaces the folder
only when it holds a later epoch.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embinit.tracking import run_readers, trial_run
from embinit.cache_root import cache_root
from embinit.storage import Mirror, Store
from embinit.sweep.claims import ClaimLost
from embinit.sweep.trial_folders import experiment_folder as experiment_folder_of, key_lock
from embinit.sweep.work import SweepContext
from embinit.trusted import check_writable, is_trusted

RUN_ID_FILE = "mlflow_run_id"
log = logging.getLogger("embinit.sweep")


@dataclass
class Claim:
    """A trial key claimed by this process, and the folder its trial trains in."""

    key: str
    path: Path
    persistent: bool  # False: a temporary folder (outside the trusted roots), gone with the sweep
    mirror: Mirror | None = None  # the folder's copy in the store (embinit.storage), when one is configured

    def discard(self) -> None:
        """Remove the folder's contents (the trial has its result, or can never resume)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True, exist_ok=True)
        if self.mirror is not None:
            self.mirror.clear()

    def sync(self) -> None:
        """After the trainer saved an epoch: copy the folder's changed files to the store (if any);
        ClaimLost when another node has taken the key over."""
        if self.mirror is not None:
            self.mirror.push(self.path)


def scratch() -> Path:
    """Where a trial's temporary folders go: embinit's own cache folder, always a trusted root, so the
    checkpoint reader (embinit.train.checkpoint.read) accepts what the trial itself wrote there."""
    folder = cache_root() / "scratch"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def experiment_folder(ctx: SweepContext) -> Path:
    """The folder of the sweep's MLflow experiment's trial folders (embinit.sweep.trial_folders)."""
    return experiment_folder_of(ctx.cache_dir, ctx.tracking_uri, ctx.experiment_id)


@contextmanager
def claim(ctx: SweepContext, key: str, restored: Path | None = None) -> Iterator[Claim]:
    """Claim `key` (waiting while another process trains it) and yield its folder; `restored` is a
    Tune checkpoint restored to disk, whose `<key>/` is taken when newer than the folder."""
    base = experiment_folder(ctx)
    if not is_trusted(base):
        tmp = Path(tempfile.mkdtemp(prefix="embinit-trial-", dir=scratch()))
        try:
            yield _ready(Claim(key, tmp / key, persistent=False), restored)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    base.mkdir(parents=True, exist_ok=True)
    base = check_writable(base, "the checkpoint folder")  # a symlink swapped in since the check above
    held = _store_claim(ctx.storage, base, key) if ctx.storage else _file_claim(base, key)
    with held as c:
        yield _ready(c, restored)


@contextmanager
def _file_claim(base: Path, key: str) -> Iterator[Claim]:
    """The claim as a `flock` on `<key>.lock` beside the folder: it holds where the folder is shared."""
    lock = base / f"{key}.lock"
    fd = key_lock(lock)
    c = Claim(key, base / key, persistent=True)
    try:
        yield c
    finally:
        if not c.path.is_dir() or not any(c.path.iterdir()):  # nothing to resume: leave no trace
            shutil.rmtree(c.path, ignore_errors=True)
            lock.unlink(missing_ok=True)  # while still locked: a waiter sees the inode change, retries
        os.close(fd)  # releases the lock


@contextmanager
def _store_claim(uri: str, base: Path, key: str) -> Iterator[Claim]:
    """The claim as a lease in the store (embinit.sweep.claims), and the folder mirrored there: the
    node's own folder is a cache of the store's copy, fetched when the store's is newer."""
    from botocore.exceptions import BotoCoreError, ClientError

    from embinit.sweep.claims import Lease, unreachable
    store = Store.from_uri(uri)
    try:
        lease = Lease(store, f"{base.name}/{key}").acquire()
    except (BotoCoreError, ClientError) as e:   # no endpoint, no credentials, refused: the node's setup
        raise unreachable(store, e) from e
    lock = base / f"{key}.lock"
    try:
        fd = key_lock(lock)   # after the lease: held by no other claim; marks the folder in use on this node
    except BaseException:
        lease.release()
        raise
    c = Claim(key, base / key, persistent=True, mirror=Mirror(store, base.name, key, lease))
    try:
        c.path.mkdir(parents=True, exist_ok=True)
        _fetch(c)
        yield c
    finally:
        try:
            if not c.path.is_dir() or not any(c.path.iterdir()):
                shutil.rmtree(c.path, ignore_errors=True)
                lock.unlink(missing_ok=True)   # while still locked, as `_file_claim` does
        finally:
            os.close(fd)
            lease.release()


def _fetch(c: Claim) -> None:
    """Take the store's copy of the folder when it holds a later epoch than the node's (or the node has
    none: a rerun on another node); files land in the node's folder, inside the trusted roots, and the
    trainer reads them through embinit.train.checkpoint.read like its own."""
    from embinit.train.checkpoint import last_epoch
    theirs, ours = c.mirror.epoch(), last_epoch(c.path, c.key)
    if theirs is not None and (ours is None or theirs > ours):
        c.mirror.pull(c.path)
    elif ours is None and not (c.path / RUN_ID_FILE).exists():
        c.mirror.pull(c.path)  # no checkpoint yet anywhere: the run id, if an earlier attempt left one


@contextmanager
def claim_all(ctx: SweepContext, keys: list[str], restored: Path | None = None) -> Iterator[dict[str, Claim]]:
    """Claims of several keys (a fused group), taken in sorted order so two groups never deadlock."""
    with ExitStack() as stack:
        yield {k: stack.enter_context(claim(ctx, k, restored)) for k in sorted(set(keys))}


def _ready(c: Claim, restored: Path | None) -> Claim:
    from embinit.train.checkpoint import last_epoch  # torch: only workers import it
    c.path.mkdir(parents=True, exist_ok=True)
    src = restored / c.key if restored is not None else None
    if src is None or not src.is_dir():
        return c
    theirs, ours = last_epoch(src, c.key), last_epoch(c.path, c.key)
    if ours is None and theirs is None and (c.path / RUN_ID_FILE).exists():
        return c
    if ours is None or (theirs is not None and theirs > ours):
        shutil.rmtree(c.path)
        shutil.copytree(src, c.path)
    return c


def tune_copy_needed(claims: list[Claim], one_machine: bool) -> bool:
    """Whether a restarted attempt of these claims' Tune trial could find its state only in Tune's
    checkpoint: some folder is temporary, or node-local (no store) on a Ray that may span machines."""
    return not all(c.persistent and (c.mirror is not None or one_machine) for c in claims)


@contextmanager
def tune_checkpoint(claims: list[Claim], one_machine: bool) -> Iterator[Any]:
    """The `checkpoint=` of an epoch's `tune.report`: the claims' folders staged for Tune to copy, or
    None when a retry finds them without Tune (`tune_copy_needed`)."""
    if not tune_copy_needed(claims, one_machine):
        yield None
        return
    from ray.tune import Checkpoint
    with staged(claims) as folder:
        yield Checkpoint.from_directory(folder)


@contextmanager
def staged(claims: list[Claim]) -> Iterator[str]:
    """A folder holding `<key>/` for each claim (hard links of its files, copies across file systems),
    for Tune to copy as the trial's checkpoint; removed after."""
    tmp = Path(tempfile.mkdtemp(prefix=".tune-", dir=claims[0].path.parent))
    try:
        for c in claims:
            shutil.copytree(c.path, tmp / c.key, copy_function=_link_or_copy,
                            ignore=shutil.ignore_patterns("*.tmp"))
        yield str(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@contextmanager
def restored_checkpoint() -> Iterator[Path | None]:
    """Tune's checkpoint of this trial (a restarted attempt) on local disk, or None."""
    from ray import tune
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        yield None
        return
    tmp = Path(tempfile.mkdtemp(prefix="embinit-restored-", dir=scratch()))
    try:
        checkpoint.to_directory(str(tmp))
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def open_run(c: Claim, ctx: SweepContext, config: dict[str, Any], label: str,
             group: dict[str, Any], key_runs: list | None = None,
             name_task: str | None = None) -> trial_run.TrialRun:
    """The trial's MLflow run: the one its folder names when that run can go on (not finished, not
    deleted, of this key and experiment), else this sweep's unfinished run of the key, else a new one.
    `key_runs`: the key's records as `run_readers.key_records` read them (read here when not given);
    `name_task`: the task a new run's name says (`WorkItem.name_task`)."""
    from embinit.train.checkpoint import last_epoch
    uri, exp_id = ctx.runs_uri, ctx.experiment_id
    id_file = c.path / RUN_ID_FILE
    run_id = id_file.read_text().strip() if id_file.exists() else None
    if run_id is not None and not run_readers.can_continue(uri, exp_id, c.key, run_id):
        c.discard()  # a leftover of a run that is gone or done: start afresh
        run_id = None
    run = trial_run.TrialRun.open(uri, exp_id, ctx.parent_run_id, config, c.key, label, group,
                                 run_id=run_id, resumed_epoch=last_epoch(c.path, c.key), key_runs=key_runs,
                                 artifacts_via=ctx.tracking_uri, name_task=name_task)
    try:
        id_file.write_text(run.run_id)
        c.sync()  # a first attempt lost before its first epoch is still reopened on another node
    except ClaimLost:  # another node trains the key now, in this run: leave the run to it
        raise
    except Exception:  # the folder's disk is full, or the store refuses: the run says why
        fail_run(run, traceback.format_exc())
        raise
    return run


def fail_run(run: trial_run.TrialRun, error: str) -> None:
    """Close the trial's run FAILED with `error` (a traceback) before its attempt raises, so the record
    says what stopped it: left RUNNING, the sweep closed it later as "the trial did not finish: its
    worker died ...", the error in Tune's log alone. Best effort: a store that fails as well (its disk is
    the full one) is logged, and the attempt's own exception is the one raised."""
    try:
        run.fail(error)
    except Exception as e:
        log.warning("could not record the failure in trial run %s: %s", run.run_id, e)


def finished_by_this_sweep(ctx: SweepContext, key_runs: list) -> bool:
    """Whether the key's newest finished run (of its records `key_runs`) is this sweep's own: a unit or
    group that Tune restarted finds the trials its first attempt finished, done here, not reused (the
    progress line said `6/6 done (4 reused)` where the sweep's summary, from MLflow, said 2)."""
    done = run_readers.newest_finished(key_runs)
    return done is not None and done.parent_id == ctx.parent_run_id


def reused_value(ctx: SweepContext, c: Claim, metric: str, key_runs: list | None = None) -> float | None:
    """The selection value of the key's finished run when it has one (another sweep finished it
    meanwhile, or while this one waited for the claim): reuse it, never train twice. `key_runs`: the
    key's records (`run_readers.key_records`), read here when not given."""
    import math
    recs = run_readers.key_records(ctx.experiment_id, ctx.runs_uri, c.key) if key_runs is None else key_runs
    done = run_readers.newest_finished(recs)
    if done is None:
        return None
    c.discard()  # a leftover folder of a key that has its result
    return done.metrics.get(f"best/{metric}", math.nan)
