"""What embinit writes to MLflow besides a trial's own run (`embinit.tracking.trial_run`): a sweep's parent run,
an analysis run, the experiment's description, and closing runs nothing writes to any more.

A sweep's run is named after its spec and its number in the experiment (`sst2-grid #3`); the spec's
description is the experiment's (`describe_experiment`); a rerun with nothing to train links the spec's
last finished sweep run (`run_readers.finished_sweep`) instead of adding one. A sweep's parent run is
FAILED when none of its trials has a result (all failed), KILLED when cancelled; one whose driver was lost
is closed as interrupted (`records.INTERRUPTED`), with its trial runs still RUNNING, by `embinit run` and
by the service alike, with the reason in `embinit.error`.
"""

from __future__ import annotations

import json
from typing import Any

from embinit.tracking import driver_liveness
from embinit.tracking.driver_liveness import DRIVER_TAG, HEARTBEAT_TAG
from embinit.errors import EmbinitError
from embinit.tracking.mlflow_store import client, ensure_experiment, log_batch, metrics_at, resolve_uri, retry
from embinit.tracking.records import (CHECKPOINT_TAG, ERROR_TAG, INTERRUPTED, KIND_TAG, N_TRIALS_TAG,
                                      RERUN_RESUMES, SPEC_HASH_TAG, SPEC_NAME_TAG, STATUS_TAG, TrialRecord)
from embinit.tracking.run_names import NOTE_TAG, sweep_run_name
from embinit.tracking.run_readers import key_records, sweep_records, trial_records
from embinit.tracking.run_records import SPEC_ARTIFACT, AnalogyRun
from embinit.tracking.trial_run import TrialRun


def sweep_status(cancelled: bool, n_results: int, n_planned: int) -> str:
    """The parent run's terminal status: KILLED when cancelled, FAILED when trials were planned and
    none has a result, else FINISHED."""
    if cancelled:
        return "KILLED"
    return "FAILED" if n_planned > 0 and n_results == 0 else "FINISHED"


def describe_experiment(exp_id: str, uri: str, description: str) -> None:
    """Show `description` (a spec's) as the experiment's description in MLflow's UI (its note tag);
    an empty one leaves the current description."""
    if not description.strip():
        return
    c = client(uri)
    if retry(lambda: c.get_experiment(exp_id)).tags.get(NOTE_TAG) != description:
        retry(lambda: c.set_experiment_tag(exp_id, NOTE_TAG, description))


def start_parent_run(exp_id: str, uri: str, spec_hash: str, spec_yaml: str, n_trials: int,
                     run_name: str | None = None) -> str:
    """A sweep's run, named after `run_name` (the spec's name, else `sweep-<spec hash>`) and its number
    among the experiment's sweep runs (`sweep_run_name`: `sst2-grid #3`), so that the sweeps of one spec
    (its grid extended, run again) are told apart in the run table; the spec's name is its
    `embinit.spec_name` tag too (`SweepRecord.spec_name`)."""
    c = client(uri)
    base = run_name or f"sweep-{spec_hash[:8]}"
    run = retry(lambda: c.create_run(exp_id, run_name=base,
                                     tags={SPEC_HASH_TAG: spec_hash, KIND_TAG: "sweep", SPEC_NAME_TAG: base,
                                           N_TRIALS_TAG: str(n_trials), DRIVER_TAG: driver_liveness.current(),
                                           HEARTBEAT_TAG: driver_liveness.beat_value()}))
    run_id = run.info.run_id
    number = sweep_number(c, exp_id, run_id, run.info.start_time)
    retry(lambda: c.update_run(run_id, name=sweep_run_name(base, number)))
    retry(lambda: c.log_text(run_id, spec_yaml, SPEC_ARTIFACT))
    return run_id


def sweep_number(c, exp_id: str, run_id: str, start_ms: int) -> int:
    """The sweep run `run_id`'s number in its experiment: 1 + how many sweep runs, deleted ones too (a
    number is never given twice), started before it (at the same millisecond: of a smaller run id). Counted
    after the run exists, so two sweeps started at once get different numbers."""
    from mlflow.entities import ViewType
    query = f"tags.`{KIND_TAG}` = 'sweep' and attributes.start_time <= {int(start_ms)}"
    n, token = 0, None
    while True:
        page = retry(lambda t=token: c.search_runs([exp_id], query, run_view_type=ViewType.ALL,
                                                   max_results=1000, page_token=t))
        n += sum(1 for r in page if (r.info.start_time, r.info.run_id) <= (start_ms, run_id))
        token = page.token
        if not token:
            return max(n, 1)


def report_note(report_md: str, limit: int = 8000) -> str:
    """The sweep run's description (its page's first text in MLflow's UI): its report in markdown, which
    MLflow renders, cut at a line past `limit` characters (MLflow's limit on a tag's value) with a line
    saying where the rest is."""
    if len(report_md) <= limit:
        return report_md
    tail = "\n\n(cut here: the whole report is this run's artifact report.md)\n"
    head = report_md[:limit - len(tail)]
    return head[:head.rfind("\n") + 1 if "\n" in head else len(head)].rstrip("\n") + tail


def end_parent_run(run_id: str, uri: str, status: str, report_md: str | None,
                   counts: dict[str, int], files: tuple[tuple[str, str], ...] = ()) -> None:
    """Close a sweep's parent run with its report (markdown, also its description: `report_note`, and
    `files`: (artifact dir, path))."""
    c = client(uri)
    if report_md:
        retry(lambda: c.log_text(run_id, report_md, "report.md"))
        retry(lambda: c.set_tag(run_id, NOTE_TAG, report_note(report_md)))
    for artifact_dir, path in files:
        retry(lambda a=artifact_dir, p=path: c.log_artifact(run_id, p, a))
    for name, value in counts.items():
        retry(lambda n=name, v=value: c.log_metric(run_id, f"sweep/{n}", v))
    retry(lambda: c.set_terminated(run_id, status=status))


def log_analysis_run(experiment: str, uri: str | None, kind: str, run_name: str, params: dict[str, Any],
                     metrics: dict[str, float], result: dict[str, Any]) -> str:
    """Record one analysis outside a sweep (e.g. Table 4's analogies) as a FINISHED MLflow run: `params`,
    `metrics`, the full `result` as the artifact result.json, tag embinit.kind=`kind`. Returns the run id."""
    c, uri = client(uri), resolve_uri(uri)
    exp_id = ensure_experiment(experiment, uri)
    run = retry(lambda: c.create_run(exp_id, run_name=run_name, tags={KIND_TAG: kind}))
    run_id = run.info.run_id
    from mlflow.entities import Param
    try:
        log_batch(c, run_id, metrics=metrics_at(metrics),
                  params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        retry(lambda: c.log_text(run_id, json.dumps(result, indent=1, default=str), "result.json"))
    except Exception as e:
        retry(lambda: c.set_terminated(run_id, "FAILED"))
        raise EmbinitError(f"could not record the {kind} run in MLflow: {e}") from e
    retry(lambda: c.set_terminated(run_id, "FINISHED"))
    return run_id


def log_analogy_run(experiment: str, uri: str | None, result: AnalogyRun, wall_s: float) -> str:
    """Record one `embinit analogy` result for the reproduction's Table 4 (kind `analogy`, named
    `analogy-seed<seed>`): its params, each row's `analogy/<slug>/...` metrics, `wall_time_s`, the whole
    `result` as result.json (`run_readers.analogy_run` reads it back) and the provenance tags (how it was
    run). Returns the run id."""
    from embinit.tracking import provenance
    run_id = log_analysis_run(experiment, uri, "analogy", f"analogy-seed{result.seed}", result.params,
                              {"wall_time_s": wall_s, **result.metrics()}, result.to_json())
    provenance.record(run_id, resolve_uri(uri))   # for the reproduction's runs section
    return run_id


def close_orphans(exp_id: str, uri: str, parent_id: str, reason: str, status: str = "FAILED",
                  tag: str | None = None) -> int:
    """Mark this sweep's child runs still RUNNING (their worker died or was stopped) as failed,
    cancelled or (`tag`) interrupted. Returns how many."""
    recs = trial_records(exp_id, uri, status="RUNNING", parent=parent_id)
    for rec in recs:
        close_run(uri, rec, reason, status, tag)
    return len(recs)


# What a closed run that keeps a checkpoint adds to its reason: KEPT, or KEPT_TOO after a reason that ends
# saying a rerun resumes already (`records.RERUN_RESUMES`, an interruption's), so it is said once.
KEPT = "; its checkpoint after epoch {epoch} is kept: running the spec again resumes this run"
KEPT_TOO = ", and this run continues from its checkpoint after epoch {epoch}"
PRUNED = "; its checkpoint folder was removed (--prune-checkpoints): running the spec again starts it over"


def close_run(uri: str, rec: TrialRecord, reason: str, status: str = "FAILED", tag: str | None = None) -> None:
    """Close a trial run nothing writes to any more; one that keeps a checkpoint says it resumes."""
    if rec.resume_epoch is not None:
        reason += (KEPT_TOO if reason.endswith(RERUN_RESUMES) else KEPT).format(epoch=rec.resume_epoch)
    TrialRun(uri, rec.run_id).fail(reason, status=status, tag=tag)


def forget_checkpoints(exp_id: str, uri: str, keys: list[str]) -> int:
    """The runs of `keys` (trials whose checkpoint folders were just removed) no longer say they keep one:
    their `embinit.checkpoint_epoch` tag goes (the dry run and the report read it as "resumes after epoch
    N") and their error says the folder was removed. Returns how many runs changed."""
    from mlflow.entities import RunTag
    c, n = client(uri), 0
    for key in keys:
        for rec in key_records(exp_id, uri, key):
            if rec.resume_epoch is None:
                continue
            error = rec.error or ""
            for kept in (KEPT, KEPT_TOO):
                error = error.replace(kept.format(epoch=rec.resume_epoch), "")
            log_batch(c, rec.run_id, tags=[RunTag(ERROR_TAG, (error + PRUNED)[-4000:])])
            retry(lambda r=rec: c.delete_tag(r.run_id, CHECKPOINT_TAG))
            n += 1
    return n


def close_sweeps(exp_id: str, uri: str, spec_hash: str, reason: str, status: str = "FAILED",
                 tag: str | None = None) -> int:
    """Close the sweep (parent) runs of a spec still RUNNING although nothing writes them any more: MLflow
    status `status`, `embinit.status` `tag` (default: failed, cancelled when KILLED), the reason in
    `embinit.error`."""
    runs = sweep_records(exp_id, uri, f"tags.`{SPEC_HASH_TAG}` = '{spec_hash}' and attributes.status = 'RUNNING'")
    for run in runs:
        close_sweep_run(run.run_id, uri, reason, status, tag)
    return len(runs)


def close_dead_sweeps(exp_id: str, uri: str, runs_uri: str | None = None) -> list[str]:
    """Close the experiment's sweep runs still RUNNING whose driver this machine sees gone (killed
    without closing them: SIGKILL, the OOM killer), and their trial runs still RUNNING (read from
    `runs_uri`, default `uri`), as interrupted: their kept checkpoints say a rerun resumes them. A sweep
    whose driver cannot be checked from here (another machine, an older sweep) is left alone. Returns
    one line per sweep closed."""
    said = []
    for sweep in sweep_records(exp_id, uri, "attributes.status = 'RUNNING'"):
        driver = sweep.tags.get(DRIVER_TAG)
        if driver_liveness.alive(driver) is not False:
            continue
        reason = (f"interrupted (its driver, {driver_liveness.describe(driver)}, ended without closing its runs: "
                  "killed outright, e.g. by SIGKILL or the OOM killer, or unable to write to this store); running "
                  "the same spec again resumes: finished trials are reused")
        n = close_orphans(exp_id, runs_uri or uri, sweep.run_id, reason, *INTERRUPTED)
        close_sweep_run(sweep.run_id, uri, reason, *INTERRUPTED)
        said.append(f"sweep run {sweep.run_id} ({sweep.name}) and {n} trial run(s) of it were RUNNING, but its driver "
                    f"({driver_liveness.describe(driver)}) is gone: closed as interrupted")
    return said


def close_sweep_run(run_id: str, uri: str, reason: str, status: str = "FAILED", tag: str | None = None,
                    details: str | None = None) -> None:
    """End a sweep's run that stopped before its report (its driver raised, was interrupted or is gone):
    MLflow status `status`, `embinit.status` `tag` (default: failed, cancelled when KILLED), `reason` in
    `embinit.error`; `details` (a traceback) as the artifact error.txt."""
    from mlflow.entities import RunTag
    c = client(uri)
    tag = tag or ("failed" if status == "FAILED" else "cancelled")
    log_batch(c, run_id, tags=[RunTag(STATUS_TAG, tag), RunTag(ERROR_TAG, reason[:4000])])
    if details:
        retry(lambda: c.log_text(run_id, details, "error.txt"))
    retry(lambda: c.set_terminated(run_id, status=status))
