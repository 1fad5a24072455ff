"""Which MLflow runs are an experiment's, and their states: its sweep runs (those its drivers started), its
trials (its planned keys; an Optuna search's, the runs its sweeps drew), the trials by state, and closing
what a driver that is gone left running.

No cache and no Ray: the API reads these through `service.store.ResultStore` (which caches its trial table
and report per experiment state), and the reconciler (`service.state`) counts and closes through it.
"""

from __future__ import annotations

from typing import Iterable

from embinit.errors import EmbinitError
from embinit.tracking import records
from embinit.tracking.run_readers import experiment_records


def chosen_records(tracking_uri: str, name: str) -> dict[str, records.TrialRecord]:
    """The record of the run that stands for each trial key of MLflow experiment `name`."""
    try:
        recs = experiment_records(name, tracking_uri)
    except EmbinitError:  # no MLflow experiment yet: nothing has run
        return {}
    return records.by_key(recs)


def count_trial_states(tracking_uri: str, name: str, keys: list[str], reused: set[str] | frozenset = frozenset(),
                       sweeps: set[str] | None = None,
                       chosen: dict[str, records.TrialRecord] | None = None) -> dict[str, int]:
    """Trials of `keys` in MLflow experiment `name` by state: pending, running, finished (diverged
    included), failed, and reused (not trained by this experiment: the keys in `reused`, and with
    `sweeps`, the experiment's sweep runs, every key whose result another sweep trained). `chosen`: the
    experiment's `chosen_records` when the caller has read them (read here otherwise)."""
    chosen = chosen_records(tracking_uri, name) if chosen is None else chosen
    if sweeps is not None:
        reused = set(reused) | records.trained_elsewhere(chosen, sweeps)
    out = {"pending": 0, "running": 0, "finished": 0, "failed": 0, "reused": 0}
    for key in keys:
        status = chosen[key].status if key in chosen else "pending"
        if status in records.RESULT:
            status = "reused" if key in reused else "finished"
        out[status if status in out else "pending"] += 1  # cancelled / interrupted: to be run again
    return out


# A sweep run started this long before its experiment's row was written still belongs to it (clocks of
# the API and of the driver's node may differ by this much).
CLOCK_SLACK_S = 60


def sweep_runs(exp, uri: str | None = None, since_submit: bool = True) -> set[str]:
    """Ids of the sweep (parent) runs of this experiment's spec (`embinit.spec_hash`), read from `uri`
    (default the experiment's tracking URI): those its drivers started, since it was submitted; with
    `since_submit=False` every one whenever started (an Optuna search resubmitted resumes from its
    earlier sweeps' trials, which are its own)."""
    from embinit.tracking import mlflow_store, run_readers

    uri = uri or exp.tracking_uri
    exp_id = mlflow_store.experiment_id(exp.mlflow_experiment, uri)
    if exp_id is None:
        return set()
    query = f"tags.`{records.SPEC_HASH_TAG}` = '{exp.spec_hash}'"
    if since_submit:
        query += f" and attributes.start_time >= {int((exp.created_at.timestamp() - CLOCK_SLACK_S) * 1000)}"
    return {r.run_id for r in run_readers.sweep_records(exp_id, uri, query)}


def drawn_records(exp, recs: Iterable[records.TrialRecord], uri: str | None = None,
                  since_submit: bool = False) -> list[records.TrialRecord]:
    """An Optuna search's trials among `recs`: it draws its configs, so its trials' keys, at run time, and
    `exp.trial_keys` (its planned points x seeds) name none of them; its trials are the runs whose parent
    is one of its spec's sweep runs (`sweep_runs`, read from `uri`; by default every one whenever started,
    as a resubmitted search resumes from its earlier sweeps' trials)."""
    sweeps = sweep_runs(exp, uri, since_submit)
    return [rec for rec in recs if rec.parent_id in sweeps]


def trial_counts(exp, uri: str) -> dict[str, int]:
    """The experiment's trials by state, read from `uri`; a key another experiment (or an earlier run)
    trained is `reused`, not `finished`."""
    from embinit.spec import drawn_in

    if not drawn_in(exp.spec):
        return count_trial_states(uri, exp.mlflow_experiment, exp.trial_keys, sweeps=sweep_runs(exp, uri))
    # an Optuna search: its trials are the runs its spec's sweeps drew (`exp.trial_keys`, its planned
    # points x seeds, have none), the rest still to draw
    chosen = chosen_records(uri, exp.mlflow_experiment)
    drawn = [rec.key for rec in drawn_records(exp, chosen.values(), uri)]
    out = count_trial_states(uri, exp.mlflow_experiment, drawn, sweeps=sweep_runs(exp, uri), chosen=chosen)
    out["pending"] += max(0, exp.n_trials - len(drawn))
    return out


def close_orphans(exp, reason: str, status: str = "FAILED", tag: str | None = None) -> int:
    """Close what this experiment left RUNNING in MLflow although its driver is gone: its trial runs
    (one that keeps a checkpoint says that a rerun resumes it, and stays resumable) and its sweep
    (parent) runs, as MLflow `status` with `embinit.status` `tag` (default: failed, cancelled when
    KILLED). Returns how many trial runs were closed."""
    from embinit.spec import drawn_in
    from embinit.tracking import mlflow_store, run_readers, run_writers

    exp_id = mlflow_store.experiment_id(exp.mlflow_experiment, exp.tracking_uri)
    if exp_id is None:
        return 0
    running = run_readers.trial_records(exp_id, exp.tracking_uri, status="RUNNING")
    if drawn_in(exp.spec):  # those of the sweeps its drivers started since it was submitted
        orphans = drawn_records(exp, running, exp.tracking_uri, since_submit=True)
    else:
        keys = set(exp.trial_keys)
        orphans = [rec for rec in running if rec.key in keys]
    for rec in orphans:
        run_writers.close_run(exp.tracking_uri, rec, reason, status, tag)
    run_writers.close_sweeps(exp_id, exp.tracking_uri, exp.spec_hash, reason, status, tag)
    return len(orphans)
