"""`embinit run SPEC --prune-checkpoints`: remove the checkpoint folders of the spec's experiment whose
trials the spec no longer plans (embinit.sweep.trial_folders), and say what went. Runs nothing else; a
folder a running trial holds is left, and so is every folder of a planned trial (the run resumes those)
and every folder of a trial that a sweep of another spec logging to the same experiment ran, or that no
run in the store names (embinit.cli.dry_run_store.retired_folders): only this spec's own are removed.

With the operator's object store (`EMBINIT_STORAGE_URI`, embinit.storage) the same goes for the store's
copies of trial folders (embinit.sweep.store_copies), by the same rule, also those of keys that trained
on another node (no folder here): each is removed under its key's lease, and one whose lease a live
process holds is left and named. A store that cannot be read is an error before anything is removed.
The tracking store is a database (SQLite, PostgreSQL, MySQL) read directly, or a tracking server read and
written through it.
The runs of the trials whose checkpoints went (the node's folder and, with a store, its copy: nothing is
left that a rerun could resume from) no longer say they keep one (`embinit.checkpoint_epoch` dropped, the
error saying the folder was removed): reverting the edit starts those trials over."""

from __future__ import annotations

from embinit.cli.dry_run_store import (copies_text, local_store, others_text, readable_store, retired_folders,
                                       server_store)
from embinit.errors import EmbinitError
from embinit.redact import masked
from embinit.tracking.store_check import resolved


def prune_checkpoints(spec, tracking_uri: str | None = None) -> str:
    """Remove the retired folders of `spec`'s experiment in the store the run would write, and the object
    store's copies of them when one is configured; the report. EmbinitError (the report in it) when a
    store copy could not be removed."""
    from embinit.sweep.trial_folders import prune, size_text
    if spec.drawn:
        raise EmbinitError("--prune-checkpoints: an Optuna search draws its trials while it runs, so no trial "
                           "folder can be told retired from its spec; nothing was removed")
    uri = resolved(spec.tracking_uri(tracking_uri))
    store = local_store(uri) or server_store(uri)   # a tracking server is read (and written) through it
    read = readable_store(uri, store)
    if read is None:
        why = (f"the prune reads a database store or a tracking server, not a {uri.split(':', 1)[0]}: store"
               if store is None else store.problem if store.state == "unreachable" else
               f"it is at an older MLflow schema (revision {store.revision}; a run upgrades it)" if store.state == "old"
               else "it holds no MLflow runs yet")
        raise EmbinitError(f"--prune-checkpoints reads the experiment from the store, and {masked(uri)} cannot be "
                           f"read here: {why}; nothing was removed")
    from embinit.tracking import mlflow_store
    exp_id = mlflow_store.experiment_id(spec.experiment_name(), read)   # its id only: no run is read
    folders = retired_folders(spec, spec.plan(), exp_id, read)
    if folders.store_problem:
        raise EmbinitError(f"--prune-checkpoints: {folders.store_problem}; nothing was removed")
    found = folders.retired
    left = ([f"left {others_text(folders, spec.name)} (a spec's rerun resumes its own trials)"]
            if folders.others else [])
    left += ([f"left {others_text(folders, spec.name, copies=True)} in {folders.store} (a spec's rerun resumes "
              "its own trials)"] if folders.other_copies else [])
    if not found and not folders.copies:
        where = f" (on this node or in the store, {folders.store})" if folders.store else ""
        return "\n".join([f"no checkpoint folder of experiment {spec.experiment_name()!r}{where} belongs to a "
                          "trial the spec no longer plans"] + left)
    lines, removed, skipped = [], [], []
    if found:
        removed, skipped = prune(found)
        lines += [f"removed {len(removed)} checkpoint folder{'s' if len(removed) != 1 else ''} "
                  f"({size_text(sum(r.size for r in removed))}) of trials the spec no longer plans, from "
                  f"{found[0].path.parent}:"]
        lines += [f"  {r.key}  {size_text(r.size):>9}  "
                  + (f"after epoch {r.epoch}" if r.epoch is not None else "no epoch saved") for r in removed]
        if skipped:
            lines.append(f"left {len(skipped)} a trial took meanwhile: " + ", ".join(r.key for r in skipped))
    done = _prune_copies(spec, exp_id, read, folders, lines) if folders.copies else None
    gone = {r.key for r in removed} | ({c.key for c in done.removed} if done else set())
    if done:   # a copy still in the store (its key held, or not removed) is what a rerun resumes from
        gone -= {c.key for c in done.held} | {c.key for c, _ in done.failed}
    from embinit.tracking.run_writers import forget_checkpoints
    forget_checkpoints(exp_id, read, sorted(gone - {r.key for r in skipped}))   # no rerun resumes them now
    if done and done.failed:
        raise EmbinitError("\n".join(lines + left))
    return "\n".join(lines + left)


def _prune_copies(spec, exp_id: str, uri: str, folders, lines: list[str]):
    """Remove the spec's own store copies (`folders.copies`), saying so in `lines`; what was done
    (embinit.sweep.store_copies.Pruned)."""
    from embinit import storage
    from embinit.sweep import store_copies, trial_folders
    from embinit.sweep.trial_folders import size_text
    folder = trial_folders.experiment_folder(spec.cache_dir, uri, exp_id)
    done = store_copies.prune(storage.Store.from_uri(storage.configured()), folder.name, list(folders.copies),
                              folder)
    if done.removed:
        lines += [f"removed {copies_text(len(done.removed), sum(c.size for c in done.removed))} of checkpoint "
                  f"folders of trials the spec no longer plans, from {folders.store}:"]
        lines += [f"  {c.key}  {size_text(c.size):>9}  "
                  + (f"after epoch {c.epoch}" if c.epoch is not None else "no epoch saved")
                  + ("" if c.local else "  (no folder on this node)") for c in done.removed]
    if done.held:
        n = len(done.held)
        lines.append(f"left {n} store cop{'ies' if n != 1 else 'y'} whose key another process holds (its lease "
                     "is live, or its lock on this node): " + ", ".join(c.key for c in done.held))
    for c, why in done.failed:
        lines.append(f"could not remove the store copy of {c.key} ({size_text(c.size)}): {why}")
    return done
