"""Everything embinit reads back from MLflow, as frozen records: trial runs (`embinit.tracking.records`), sweep
runs and the spec each recorded, analysis runs, an analogy run's result and metric histories
(`embinit.tracking.run_records`), each through one reader here; artifacts are downloaded here too.

A trial's key has a result when it has a FINISHED run (diverged runs are finished results); which run
stands for a key is `embinit.tracking.records.by_key`.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from embinit.errors import EmbinitError
from embinit import task_defs
from embinit.redact import masked
from embinit.tracking.mlflow_store import (client, experiment_id, moved_artifacts, no_experiment, resolve_uri, retry,
                                          search_runs)
from embinit.tracking import run_table
from embinit.tracking.records import (CONFIG_TAG, KEY_TAG, KIND_TAG, PARENT_TAG, RESULT, SPEC_HASH_TAG, TrialRecord,
                                      by_key, from_run, from_runs)
from embinit.tracking.run_records import (SPEC_ARTIFACT, AnalogyRun, AnalysisRecord, MetricHistory, StoredSpec,
                                          SweepRecord, analysis_from_run, history_from_metrics, sweeps_from_runs)

if TYPE_CHECKING:
    from embinit.spec import ExperimentSpec

PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"   # mlflow.environment_variables, read at each download


def finished_keys(exp_id: str, uri: str | None = None, recs: list[TrialRecord] | None = None) -> dict[str, str]:
    """trial key -> run id of its newest FINISHED run (finished or diverged: a result): the record
    `records.by_key` chooses among the FINISHED `trial_records` (a SQL store read as plain rows; `recs`:
    those records, where the caller has read them)."""
    recs = trial_records(exp_id, uri, "FINISHED") if recs is None else recs
    return {key: rec.run_id for key, rec in by_key(recs).items() if key}


def key_records(exp_id: str, uri: str | None, key: str) -> list[TrialRecord]:
    """Every run of a trial key, any status, newest first: one search answers both what a worker asks
    before training a key (has it a result? has this sweep an unfinished run of it?). A SQL store is read
    as plain rows (`embinit.tracking.run_table`), a tracking server with `search_runs`."""
    rows = run_table.rows(exp_id, uri, key=key)
    return from_runs(rows if rows is not None else search_runs(exp_id, uri, f"tags.`{KEY_TAG}` = '{key}'"))


def newest_finished(recs: list[TrialRecord]) -> TrialRecord | None:
    """The newest of `recs` with a result (MLflow status FINISHED: finished or diverged), or None."""
    done = [r for r in recs if r.status in RESULT]
    return max(done, key=lambda r: r.start_ms) if done else None


def finished_run(exp_id: str, uri: str | None, key: str) -> TrialRecord | None:
    """The record of the newest FINISHED run of a trial key, or None."""
    return newest_finished(key_records(exp_id, uri, key))


def trial_record(c, uri: str | None, run_id: str) -> TrialRecord:
    """The record of one trial run by its id (`embinit train --from-run`), read with the client `c` of
    the store at `uri` (`embinit.tracking.store_check.require_store`); an error naming the run and the store when
    the store has no such run, or when the run is not a trial (no `embinit.config` tag: a sweep's or an
    analysis's run)."""
    where = masked(resolve_uri(uri))
    try:
        run = retry(lambda: c.get_run(run_id))
    except Exception as e:  # MLflow raises several types for a run it does not have
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        raise EmbinitError(f"no MLflow run {run_id!r} in {where}: {first}") from None
    rec = from_run(run)
    if rec is None or CONFIG_TAG not in run.data.tags:
        kind = run.data.tags.get(KIND_TAG)
        what = f"a {kind} run (embinit.kind={kind})" if kind else "not a trial run"
        # a sweep's trials are runs of their own beside it, not nested under it (records.PARENT_TAG)
        trials = f"; this sweep's trials are tagged {PARENT_TAG}={run_id}" if kind == "sweep" else ""
        raise EmbinitError(f"MLflow run {run_id!r} ({run.info.run_name or 'unnamed'}) in {where} is {what}: it has "
                           f"no {CONFIG_TAG} tag to re-run; give the run id of a trial run (named <label>-s<seed>, "
                           f"tagged {KEY_TAG}), not a sweep's run{trials}")
    return rec


def trial_records(exp_id: str, uri: str | None = None, status: str | None = None,
                  parent: str | None = None) -> list[TrialRecord]:
    """The experiment's trial runs as records, newest first: those with MLflow status `status`
    (RUNNING, FINISHED, ...) and of the sweep run `parent`, when given. A SQL store is read as plain rows
    (`embinit.tracking.run_table`, ~10x faster than `search_runs` over thousands of runs), a tracking server
    with `search_runs`."""
    rows = run_table.rows(exp_id, uri, status)
    if rows is None:
        wanted = ([f"attributes.status = '{status}'"] if status else []) + (
            [f"tags.`{PARENT_TAG}` = '{parent}'"] if parent else [])
        rows = search_runs(exp_id, uri, " and ".join(wanted))
    recs = from_runs(rows)
    return [r for r in recs if r.parent_id == parent] if parent else recs


def experiment_records(experiment_name: str, tracking_uri: str | None = None) -> list[TrialRecord]:
    """Every trial run of the named experiment as a record; an error when there is no such experiment."""
    exp_id = experiment_id(experiment_name, tracking_uri)
    if exp_id is None:
        raise no_experiment(experiment_name, tracking_uri)
    return trial_records(exp_id, tracking_uri)


def trial_row(rec: TrialRecord) -> dict[str, Any]:
    """A record as a plain row: key, config, status, label, task, its axes' and search point's values
    (`axes`, `point`: what its run name and the report's row name show), its reported metric and value,
    best epoch, run id and run name, error text (failed runs)."""
    entry = task_defs.entry_of(rec.task, rec.config.get("task_def") if isinstance(rec.config, dict) else None)
    metric = entry.primary if entry is not None else None
    return {"key": rec.key, "config": rec.config, "status": rec.status, "label": rec.label, "task": rec.task,
            "axes": rec.axes or {}, "point": rec.point or {},
            "metric": metric, "value": rec.metrics.get(metric) if metric else None,
            "best_epoch": rec.metrics.get("best_epoch"), "run_id": rec.run_id, "run_name": rec.name,
            "error": rec.error}


def list_trials(experiment_name: str, tracking_uri: str | None = None) -> list[dict[str, Any]]:
    """Every trial run of an experiment as a `trial_row`, newest first."""
    return [trial_row(r) for r in experiment_records(experiment_name, tracking_uri)]


def sweep_records(exp_id: str, uri: str | None = None, filter_string: str = "") -> list[SweepRecord]:
    """The experiment's sweep (parent) runs matching the filter (ANDed with the sweep kind), oldest first."""
    kind = f"tags.`{KIND_TAG}` = 'sweep'"
    runs = search_runs(exp_id, uri, f"{kind} and {filter_string}" if filter_string else kind)
    return sorted(sweeps_from_runs(runs), key=lambda r: r.start_ms)


def finished_sweep(exp_id: str, uri: str, spec_hash: str) -> str | None:
    """The newest FINISHED sweep run of the spec `spec_hash`, or None: a rerun that trains nothing links
    it instead of adding an empty sweep run."""
    runs = sweep_records(exp_id, uri, f"tags.`{SPEC_HASH_TAG}` = '{spec_hash}' and attributes.status = 'FINISHED'")
    return max(runs, key=lambda r: r.start_ms).run_id if runs else None


def no_trial_runs(experiment: str, uri: str | None = None) -> EmbinitError:
    """The error for an experiment with nothing to report: it has no trial run, naming the runs it holds
    by kind (`2 analogy runs`, logged by `embinit analogy --log-experiment`)."""
    from collections import Counter
    exp_id = experiment_id(experiment, uri)
    kinds = Counter(r.data.tags.get(KIND_TAG, "untagged") for r in search_runs(exp_id, uri)) if exp_id else {}
    held = ", ".join(f"{n} {kind} run{'s' if n != 1 else ''}" for kind, n in sorted(kinds.items()))
    return EmbinitError(f"MLflow experiment {experiment!r} in {masked(resolve_uri(uri))} has no trial runs to "
                        f"report (tagged {KEY_TAG}, logged by `embinit run`); it holds {held or 'no runs'}")


def analysis_records(experiment: str, uri: str | None, kind: str) -> list[AnalysisRecord]:
    """The FINISHED runs of one analysis kind in an experiment, oldest first (empty when the experiment
    is missing)."""
    exp_id = experiment_id(experiment, uri)
    if exp_id is None:
        return []
    runs = search_runs(exp_id, uri, f"tags.`{KIND_TAG}` = '{kind}' and attributes.status = 'FINISHED'")
    return sorted(map(analysis_from_run, runs), key=lambda r: r.start_ms)


@contextmanager
def _quiet_downloads() -> Iterator[None]:
    """No "Downloading artifacts" progress bar from MLflow (above a report, between a document's lines)."""
    before = os.environ.get(PROGRESS_BAR)
    os.environ[PROGRESS_BAR] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PROGRESS_BAR, None)
        else:
            os.environ[PROGRESS_BAR] = before


def artifact_text(run: SweepRecord | AnalysisRecord, path: str, uri: str | None = None) -> str:
    """The text of an artifact of a sweep or analysis run; an EmbinitError naming the run and the
    artifact when it is missing or cannot be read. `uri`: the tracking store, which resolves an artifact
    a tracking server serves (`mlflow-artifacts:`); None leaves that to MLflow (MLFLOW_TRACKING_URI)."""
    import mlflow
    where = resolve_uri(uri) if uri else None
    try:
        with tempfile.TemporaryDirectory() as tmp, _quiet_downloads():
            local = retry(lambda: mlflow.artifacts.download_artifacts(
                artifact_uri=f"{moved_artifacts(run.artifact_uri, uri)}/{path}", tracking_uri=where, dst_path=tmp))
            return Path(local).read_text(encoding="utf-8")
    except Exception as e:  # MLflow raises several types for a missing artifact
        why = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__   # MLflow's last line says why
        raise EmbinitError(f"run {run.name!r} ({run.run_id}) has no readable {path} artifact ({why})") from None


def artifact_file(run_id: str, path: str, dst: str | None = None, uri: str | None = None) -> Path:
    """An artifact of any run (a trial's checkpoint) downloaded into the folder `dst` (None: a new
    temporary one); an EmbinitError naming the run and the artifact when it cannot be. `uri` None:
    MLflow's own tracking URI."""
    import mlflow
    try:
        with _quiet_downloads():   # no progress bars between a command's lines (`embinit similarity RUN RUN`)
            return Path(retry(lambda: mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path=path, tracking_uri=resolve_uri(uri) if uri else None, dst_path=dst)))
    except Exception as e:  # MLflow raises several types for a missing run / artifact
        raise EmbinitError(f"cannot download {path} of MLflow run {run_id}: "
                           f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def sweep_spec(run: SweepRecord, uri: str | None = None) -> StoredSpec:
    """The spec a sweep run recorded (its `spec.yaml` artifact): the text as written and the spec it
    loads as here, or why it no longer loads. An EmbinitError naming the run when the artifact is missing
    or cannot be read. `uri`: the tracking store (`artifact_text`)."""
    from embinit.spec import load_spec
    text = artifact_text(run, SPEC_ARTIFACT, uri)
    try:
        spec: ExperimentSpec = load_spec(text)
    except EmbinitError as e:   # a SpecError: written by another version, or not a spec
        return StoredSpec(text, None, str(e))
    return StoredSpec(text, spec)


def analogy_run(run: AnalysisRecord) -> AnalogyRun:
    """The result an analogy run recorded (`run_writers.log_analogy_run`); an EmbinitError naming the run
    when its result.json is missing or is not an analogy result."""
    text = artifact_text(run, "result.json")
    try:
        return AnalogyRun.from_json(json.loads(text), run.run_id, run.name)
    except ValueError as e:   # json.JSONDecodeError is one
        raise EmbinitError(f"run {run.name!r} ({run.run_id}): its result.json is not an analogy result: "
                           f"{e}") from None


def analogy_runs(runs: list[AnalysisRecord]) -> tuple[list[AnalogyRun], list[str]]:
    """(the results of the analogy runs that have a readable one, the message of each that has not)."""
    read, notes = [], []
    for run in runs:
        try:
            read.append(analogy_run(run))
        except EmbinitError as e:
            notes.append(str(e))
    return read, notes


def metric_history(uri: str | None, run_id: str, metric: str) -> MetricHistory:
    """One metric of a run, one value per step (the last logged: a resumed trial re-logs epochs)."""
    c = client(uri)
    return history_from_metrics(run_id, metric, retry(lambda: c.get_metric_history(run_id, metric)))


def metric_histories(uri: str | None, run_ids: list[str], metric: str) -> dict[str, MetricHistory]:
    """`metric_history` of many runs: on a SQL store in a few queries (`embinit.tracking.run_table.histories`),
    else one call per run. The same rule per step (the value logged last)."""
    logged = run_table.histories(uri, list(run_ids), metric)
    if logged is None:
        return {run_id: metric_history(uri, run_id, metric) for run_id in run_ids}
    return {run_id: history_from_metrics(run_id, metric, values) for run_id, values in logged.items()}


def can_continue(uri: str, exp_id: str, key: str, run_id: str) -> bool:
    """Whether `run_id` is an unfinished, undeleted run of trial `key` in experiment `exp_id`."""
    try:
        run = retry(lambda: client(uri).get_run(run_id))
    except Exception:  # deleted for good, or never in this store
        return False
    return (run.info.experiment_id == str(exp_id) and run.info.lifecycle_stage == "active"
            and run.data.tags.get(KEY_TAG) == key and run.info.status != "FINISHED")
