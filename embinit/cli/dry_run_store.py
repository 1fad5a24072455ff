"""What a dry run reads from the tracking store the run would write: whether it can read it (a database
at this MLflow's schema; a dry run starts, creates and migrates nothing), the spec's experiment's trial
records (read once), the planned keys they have finished (the run reuses them) and those it resumes from a
checkpoint (`resumes`), which the trial lines mark and the cost counts from their checkpoint on; and the
checkpoint folders of trials the spec no longer plans (`retired_folders`), told the spec's own or others'
by those records: this node's folders and, with the operator's object store (embinit.storage), the
store's copies of them, by its listing (also those of keys trained on another node). The dry run counts
them (`retired_lines`; a store that cannot be listed is a note), `--prune-checkpoints` removes the spec's
own (embinit.cli.prune)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from embinit.redact import masked
from embinit.tracking.records import RESULT   # a trial run's statuses with a result (MLflow's FINISHED)
from embinit.tracking.store_check import (StoreState, StoreUnreachable, database_store, is_server_database,
                                          sqlite_path, sqlite_store)


def local_store(uri: str) -> StoreState | None:
    """The store at `uri` when it is a database: a SQLite file, or a PostgreSQL or MySQL database (None: a
    tracking server, not read by a dry run); one the run would refuse (not SQLite, another application's
    tables) is an EmbinitError here too. Checked once per dry run."""
    path = sqlite_path(uri)
    if path is not None:
        return sqlite_store(path)
    if not is_server_database(uri):
        return None
    try:
        return database_store(uri)
    except StoreUnreachable as e:   # planned away from the cluster: the plan is still worth printing
        return StoreState(masked(uri), "unreachable", problem=str(e))


def server_store(uri: str) -> StoreState | None:
    """The store behind the tracking server at `uri` (http, https), as a dry run reads it: through the
    server, which keeps its own schema ("current"), or "unreachable" when the server does not answer (its
    trials are then not counted, and the note says so, instead of every trial read as still to train);
    None for a URI that is no server."""
    if not uri.startswith(("http://", "https://")):
        return None
    from embinit.tracking.server_check import unreachable
    if (why := unreachable(uri)) is not None:
        return StoreState(masked(uri), "unreachable", problem=f"the MLflow server {masked(uri)} cannot be reached "
                                                              f"({why})")
    return StoreState(masked(uri), "current")


def readable_store(uri: str, store: StoreState | None) -> str | None:
    """`uri` when the dry run reads it: an MLflow store in a database at this MLflow's schema (a dry run
    starts nothing, creates nothing, migrates nothing); else None."""
    return uri if store is not None and store.state == "current" else None


def store_lines(store: StoreState | None) -> list[str]:
    """A note on a store the run would upgrade (its finished trials are not read here)."""
    if store is not None and store.state == "unreachable":
        return ["", f"note: {store.problem}; the trials it has finished are not counted here"]
    if store is None or store.state != "old":
        return []
    kept = ("keeping no copy of a database server's store (back it up first)" if store.on_server
            else f"keeping a copy at {store.path}.bak-{store.revision}")
    return ["", f"note: the MLflow store {store.path} has an out-of-date schema (revision {store.revision}; this "
                f"MLflow reads {store.head}): the run upgrades it, {kept}; the trials it has finished are not "
                f"counted here"]


def experiment_trials(spec, uri: str | None) -> tuple[str | None, list]:
    """(the id of the spec's experiment in the store at `uri`, its trial runs' records, newest first):
    read once for the whole dry run (the reused keys, the unfinished marks and the measured epochs read
    it three times before). (None, []): no store to read (`readable_store`) or no such experiment."""
    if uri is None:
        return None, []
    from embinit.tracking import mlflow_store, run_readers
    exp_id = mlflow_store.experiment_id(spec.experiment_name(), uri)
    return exp_id, [] if exp_id is None else run_readers.trial_records(exp_id, uri)


def finished_here(plan, recs: list) -> set[str]:
    """The planned keys that the spec's experiment (its trial records `recs`) has finished: the run reuses
    them (`run_readers.finished_keys`: a key with a FINISHED run)."""
    return {r.key for r in recs if r.status in RESULT} & {p.key for p in plan}


class Resume(NamedTuple):
    """What the run does with a planned key's unfinished run: `mark`, said on the trial's line, and the
    epoch whose checkpoint it resumes after (None: not known; the trial is costed in full)."""
    mark: str
    epoch: int | None


def resumes(plan, exp_id: str | None, uri: str | None, recs: list, done: set[str],
            folder: Path | None = None) -> dict[str, Resume]:
    """A `Resume` per planned key (not in `done`) whose newest run (of `recs`, the experiment's records,
    newest first) is unfinished with its checkpoint kept: an interrupted or failed run, or one MLflow has
    RUNNING while its sweep is gone (embinit.tracking.driver_liveness.stale_trials: nothing trains it). A
    run RUNNING in a live sweep is not marked (the run waits for it and reuses its result). `folder`: this
    node's folder of the experiment's checkpoints (embinit.sweep.trial_folders.experiment_folder); a key
    whose run says it kept a checkpoint that the folder lacks is said to start over, and is costed in full
    (None: not looked at, as with the operator's object store, whose copy the run fetches)."""
    if exp_id is None:
        return {}
    from embinit.tracking import driver_liveness
    keys = {p.key for p in plan} - done
    newest: dict[str, object] = {}
    for r in recs:   # newest first
        if r.key in keys:
            newest.setdefault(r.key, r)
    out = {key: _resume(f"{r.status} after epoch {r.resume_epoch}", ": the run resumes it from its checkpoint",
                        key, r.resume_epoch, folder)
           for key, r in newest.items() if r.status in ("interrupted", "failed") and r.resumable}
    running = [r for r in newest.values() if r.status == "running"]
    out.update({t["key"]: _resume(f"RUNNING in MLflow, not training: {t['why']}", "; the run resumes it"
                                  + (f" after epoch {t['resume_epoch']}" if t["resume_epoch"] is not None else ""),
                                  t["key"], t["resume_epoch"], folder)
                for t in driver_liveness.stale_trials(exp_id, uri, running)})
    return out


def _resume(said: str, resumes: str, key: str, epoch: int | None, folder: Path | None) -> Resume:
    """The `Resume` of a key whose run `said` how it stopped, and kept a checkpoint after `epoch`: the run
    `resumes` it, unless `folder` lacks that checkpoint (its run was moved to another `cache_dir` or node,
    or the cache cleared): the run then starts the trial over in a run of its own."""
    from embinit.sweep.trial_folders import kept_epoch
    if folder is None or epoch is None or kept_epoch(folder, key) is not None:
        return Resume(said + resumes, epoch)
    return Resume(f"{said}, but its checkpoint is not in {folder} (another cache_dir or node, or a cleared "
                  "cache): the run starts it over", None)


class Folders(NamedTuple):
    """The checkpoint folders of the spec's experiment whose keys its plan no longer has
    (embinit.sweep.trial_folders.Retired): `retired`, those of trials only sweeps of this spec (by its
    name) ran, which the prune removes; `others`, which it leaves: those another spec sharing the
    experiment ran too (its rerun resumes them) and those no run in the store names. `owners`: key -> the
    names of the specs whose sweeps ran it. With the operator's object store (embinit.storage), the same
    for its copies of trial folders (embinit.sweep.store_copies.Copy), this node's folder or none:
    `copies` (the spec's own, also those whose key is in use: the prune leaves and names them),
    `other_copies` (others', and unknown keys', not in use); `store`: where they are (`s3://...`);
    `store_problem`: why the store's copies could not be read (the dry run notes it, the prune refuses)."""
    retired: list
    others: list
    owners: dict[str, set[str]]
    copies: tuple | list = ()
    other_copies: tuple | list = ()
    store: str | None = None
    store_problem: str | None = None


def retired_folders(spec, plan, exp_id: str | None, uri: str | None, recs: list | None = None) -> Folders:
    """The spec's `Folders` in the store at `uri` (`exp_id`: its experiment there; `recs`: the experiment's
    trial records when read already, else only the unplanned keys' are read); none for an Optuna search
    (its keys are drawn while it runs) or without a store to read. The object store's copies are read
    when one is configured (`embinit.storage.configured`)."""
    if exp_id is None or uri is None or spec.drawn:
        return Folders([], [], {})
    from embinit.sweep import trial_folders
    folder = trial_folders.experiment_folder(spec.cache_dir, uri, exp_id)
    planned = {p.key for p in plan}
    found = trial_folders.retired(folder, planned)
    where, copies, problem = _store_copies(folder, planned)
    keys = {r.key for r in found} | {c.key for c in copies}
    owners = _owners(exp_id, uri, keys, recs) if keys else {}
    mine = [r for r in found if owners.get(r.key) == {spec.name}]
    my_copies = [c for c in copies if owners.get(c.key) == {spec.name}]
    return Folders(mine, [r for r in found if r not in mine], owners, my_copies,
                   [c for c in copies if c not in my_copies and not c.held], where, problem)


def _store_copies(folder, planned: set[str]) -> tuple[str | None, list, str | None]:
    """(where the store keeps the experiment's copies, those of keys not `planned`, why they could not be
    read) with a configured object store; (None, [], None) without one. `folder`: this node's folder of
    the experiment, whose name the store's copies go by."""
    from embinit import storage
    from embinit.errors import EmbinitError
    try:
        uri = storage.configured()
    except EmbinitError as e:   # EMBINIT_STORAGE_URI is not an S3 location
        return None, [], str(e)
    if uri is None:
        return None, [], None
    from embinit.sweep import store_copies
    store = storage.Store.from_uri(uri)
    where = store_copies.location(store, folder.name)
    try:
        return where, store_copies.retired(store, folder.name, planned, folder), None
    except EmbinitError as e:
        return where, [], str(e)


def _owners(exp_id: str, uri: str, keys: set[str], recs: list | None) -> dict[str, set[str]]:
    """key -> the names of the specs whose sweeps' runs of that key are in the store (a sweep run's
    `SweepRecord.spec_name`: its `embinit.spec_name` tag, an older one's run name)."""
    from embinit.tracking import run_readers
    if recs is None:
        recs = [r for key in sorted(keys) for r in run_readers.key_records(exp_id, uri, key)]
    sweeps = {s.run_id: s.spec_name for s in run_readers.sweep_records(exp_id, uri)}
    out: dict[str, set[str]] = {}
    for r in recs:
        if r.key in keys and r.parent_id in sweeps:
            out.setdefault(r.key, set()).add(sweeps[r.parent_id])
    return out


def retired_lines(folders: Folders, spec_name: str, command: str) -> list[str]:
    """A note on the folders of `retired_folders`, and on the store's copies (none: []); `command` is the
    one that removes the spec's own."""
    from embinit.sweep.trial_folders import size_text
    lines = []
    if folders.retired:
        n, size = len(folders.retired), sum(r.size for r in folders.retired)
        lines += ["", f"note: {n} checkpoint folder{'s' if n != 1 else ''} ({size_text(size)}) in "
                      f"{folders.retired[0].path.parent} belong{'s' if n == 1 else ''} to trials this spec no "
                      f"longer plans (interrupted before the spec was edited): nothing resumes them; `{command}` "
                      "removes them"]
    if folders.others:
        lines += ["", f"note: {others_text(folders, spec_name)} in {folders.others[0].path.parent}: the prune leaves "
                      "them (a spec's rerun resumes its own trials)"]
    mine = [c for c in folders.copies if not c.held]   # one in use is not counted, as a node's folder
    if mine:
        n, size, away = len(mine), sum(c.size for c in mine), sum(not c.local for c in mine)
        lines += ["", f"note: {copies_text(n, size)} of checkpoint folders in {folders.store} "
                      f"belong{'s' if n == 1 else ''} to trials this spec no longer plans"
                      + (f" ({away} with no folder on this node)" if away else "")
                      + f": nothing resumes them; `{command}` removes them"]
    if folders.other_copies:
        lines += ["", f"note: {others_text(folders, spec_name, copies=True)} in {folders.store}: the prune "
                      "leaves them (a spec's rerun resumes its own trials)"]
    if folders.store_problem:
        lines += ["", f"note: {folders.store_problem}; its copies of trial folders are not counted here"]
    return lines


def copies_text(n: int, size: int) -> str:
    """`n store copies (size)`: copies of trial folders in the object store."""
    from embinit.sweep.trial_folders import size_text
    return f"{n} store cop{'ies' if n != 1 else 'y'} ({size_text(size)})"


def others_text(folders: Folders, spec_name: str, copies: bool = False) -> str:
    """`n checkpoint folders (size) of trials of other specs ...`: the folders the prune leaves (`copies`:
    the store's copies it leaves)."""
    from embinit.sweep.trial_folders import size_text
    items = folders.other_copies if copies else folders.others
    n, size = len(items), sum(r.size for r in items)
    names = sorted({name for r in items for name in folders.owners.get(r.key, ())} - {spec_name})
    whose = ([f"of other specs sharing the experiment ({', '.join(map(repr, names))})"] if names else []) \
        + ([f"that no run in {'the tracking' if copies else 'this'} store names"]
           if any(not folders.owners.get(r.key) for r in items) else [])
    what = (copies_text(n, size) if copies
            else f"{n} checkpoint folder{'s' if n != 1 else ''} ({size_text(size)})")
    return f"{what} of trials {' or '.join(whose)}"
