"""`embinit run SPEC --prune-checkpoints`: remove the checkpoint folders of the spec's experiment whose
trials the spec no longer plans (embinit.sweep.trial_folders), and say what went. Runs nothing else; a
folder a running trial holds is left, and so is every folder of a planned trial (the run resumes those)
and every folder of a trial that a sweep of another spec logging to the same experiment ran, or that no
run in the store names (embinit.cli.dry_run_store.retired_folders): only this spec's own are removed."""

from __future__ import annotations

from embinit.cli.dry_run_store import local_store, others_text, readable_store, retired_folders
from embinit.errors import EmbinitError
from embinit.redact import masked
from embinit.tracking.store_check import resolved


def prune_checkpoints(spec, tracking_uri: str | None = None) -> str:
    """Remove the retired folders of `spec`'s experiment in the store the run would write; the report."""
    from embinit.sweep.trial_folders import prune, size_text
    if spec.drawn:
        raise EmbinitError("--prune-checkpoints: an Optuna search draws its trials while it runs, so no trial "
                           "folder can be told retired from its spec; nothing was removed")
    uri = resolved(spec.tracking_uri(tracking_uri))
    read = readable_store(uri, local_store(uri))
    if read is None:
        raise EmbinitError(f"--prune-checkpoints reads the experiment from the store, and {masked(uri)} cannot be "
                           "read here (a tracking server, or a store at another MLflow schema); nothing was removed")
    from embinit.tracking import mlflow_store
    exp_id = mlflow_store.experiment_id(spec.experiment_name(), read)   # its id only: no run is read
    folders = retired_folders(spec, spec.plan(), exp_id, read)
    found = folders.retired
    left = ([f"left {others_text(folders, spec.name)} (a spec's rerun resumes its own trials)"]
            if folders.others else [])
    if not found:
        return "\n".join([f"no checkpoint folder of experiment {spec.experiment_name()!r} belongs to a trial the "
                          "spec no longer plans"] + left)
    removed, skipped = prune(found)
    lines = [f"removed {len(removed)} checkpoint folder{'s' if len(removed) != 1 else ''} "
             f"({size_text(sum(r.size for r in removed))}) of trials the spec no longer plans, from "
             f"{found[0].path.parent}:"]
    lines += [f"  {r.key}  {size_text(r.size):>9}  "
              + (f"after epoch {r.epoch}" if r.epoch is not None else "no epoch saved") for r in removed]
    if skipped:
        lines.append(f"left {len(skipped)} a trial took meanwhile: " + ", ".join(r.key for r in skipped))
    return "\n".join(lines + left)
