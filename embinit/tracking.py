"""Everything embinit writes to and reads from MLflow.

Layout: one MLflow experiment per spec name; one parent run per sweep submission; one child run per
trial, created by the trial itself inside its Ray worker (so no driver-side logger can lose the tracking
URI or stage artifacts on the wrong machine). A child run carries:
- tags `embinit.trial_key`, `embinit.label` (paper label), `embinit.task`, `embinit.seed`,
  `embinit.status` (running | finished | diverged | failed), `embinit.config` (the config as JSON),
  `embinit.error` for failures, `embinit.sweep_run` (the sweep's run id: the latest sweep that trained
  it); `embinit.checkpoint_epoch` while its checkpoint folder is kept (embinit.sweep.resume: a run that
  did not finish resumes from it when its spec runs again; deleted once nothing is kept) and
  `embinit.resumed_after_epoch` on a run a rerun continued;
- tags `embinit.init` (= the label) and `embinit.group` for MLflow's run table: "Group by" the tag
  `embinit.init` averages the seeds of each init;
- its name `<label>-s<seed>`; params: the flat trial config with the task defaults
  filled in (unset options are left out), `init` = the label and `init_spec` = the init as written
  (embinit.run_names), and `model_parameters`/`trainable_parameters` from when training starts;
- metrics: per epoch (step = epoch) `train/loss`, `val/loss`, `val/<metric>`, `tokens_per_s`, ...; at the
  end `test/*`, `best/<val metric>`, `best_epoch` and the key statistics of the initial target table
  (`init/emb/<KEY_EMB_STATS>`: Table 2's columns); every embedding statistic, at init and at the best
  epoch, both tables, goes to the table artifact `emb_stats.json` (one row per statistic); with the
  spec's `analyses`, `sim/*` and `probe/*` at optimizer steps, `init/probe/*` and `best/probe/*`.
A sweep's run is named after its spec; the spec's description is the experiment's (`describe_experiment`);
a rerun with nothing to train links the spec's last finished sweep run (`finished_sweep`) instead of
adding one.
A trial's key has a result when it has a FINISHED run (diverged runs are finished results). A sweep's
parent run is FAILED when none of its trials has a result (all failed), KILLED when cancelled; one
whose driver was lost is closed FAILED (KILLED) by the service with the reason in `embinit.error`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from embinit.errors import EmbinitError
from embinit.run_names import NOTE_TAG, trial_params, trial_run_name
from embinit.task_registry import TASKS, primary_metric
from embinit.records import (  # noqa: F401 (the tag names and run_status are part of this module's API)
    BLEU_SIGNATURE_TAG, CHECKPOINT_TAG, CONFIG_TAG, ERROR_TAG, EXECUTION_TAG, GROUP_TAG, INIT_TAG, KEY_TAG, KIND_TAG,
    LABEL_TAG, N_TRIALS_TAG, PARENT_TAG, RESUMED_TAG, SEED_TAG, SPEC_HASH_TAG, STATUS_TAG, TASK_TAG, TRAINER_LABEL_TAG,
    TrialRecord, from_runs, run_status)

DEFAULT_URI = "sqlite:///mlflow.db"
# Embedding statistics kept as metrics (Table 2's columns, read by the reproduction); the rest of the
# ~70 statistics go to the `emb_stats.json` table artifact instead of one-value bar charts.
KEY_EMB_STATS = ("rows", "min", "max", "mean", "std", "scaled_min", "scaled_max", "scaled_std", "pe_std",
                 "absorption")


def resolve_uri(uri: str | None = None) -> str:
    """The tracking URI with relative SQLite/file paths made absolute, so Ray workers (whatever their
    working directory) write to the same store as the driver."""
    uri = uri or DEFAULT_URI
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    if "://" not in uri:
        return Path(uri).resolve().as_uri()
    return uri


def artifact_root(uri: str) -> str | None:
    """Artifacts beside a SQLite store (`./mlartifacts`, like `mlflow server`); the server decides
    otherwise."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").as_uri()
    return None


def client(uri: str | None = None):
    from mlflow import MlflowClient  # mlflow import costs ~1 s; only trackers pay it
    return MlflowClient(tracking_uri=resolve_uri(uri))


def retry(fn: Callable[[], Any], attempts: int = 8) -> Any:
    """Retry a store call that lost a race for SQLite's write lock (concurrent trials)."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:  # mlflow wraps sqlalchemy errors in several types
            if "locked" not in str(e).lower() or i == attempts - 1:
                raise
            time.sleep(0.05 * 2 ** i)


def ensure_experiment(name: str, uri: str | None = None) -> str:
    """The experiment id for `name`, created (artifacts beside a SQLite store) if needed; a name whose
    artifact folder would lie outside the artifact root (`../x`) is an error, new or not."""
    c, uri = client(uri), resolve_uri(uri)
    _exp_artifacts(uri, name)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        try:
            # the kind tag makes MLflow 3's UI open the experiment on its run table, not the GenAI pages
            return retry(lambda: c.create_experiment(name, artifact_location=_exp_artifacts(uri, name),
                                                     tags={"mlflow.experimentKind": "custom_model_development"}))
        except Exception:  # a concurrent creator won the race
            exp = c.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        raise EmbinitError(f"MLflow experiment {name!r} is deleted; restore it or choose another name")
    return exp.experiment_id


def _exp_artifacts(uri: str, name: str) -> str | None:
    """The experiment's artifact folder under the store's artifact root; EmbinitError when `name`
    (`../../x`, an absolute path, a symlink in the root) would place it outside."""
    root = artifact_root(uri)
    if not root:
        return None
    base = os.path.realpath(Path(uri[len("sqlite:///"):]).parent / "mlartifacts")
    if not Path(os.path.realpath(os.path.join(base, name))).is_relative_to(base) or name in ("", "."):
        raise EmbinitError(f"MLflow experiment name {name!r} would put its artifacts outside the artifact "
                           f"root {base}; use a plain name (letters, digits, '_', '.', '-')")
    return f"{root}/{name}"


def experiment_id(name: str, uri: str | None = None) -> str | None:
    exp = client(uri).get_experiment_by_name(name)
    return exp.experiment_id if exp is not None else None


def no_experiment(name: str, uri: str | None = None) -> EmbinitError:
    """The error for an experiment the store lacks, naming the closest one and those it has."""
    from embinit.errors import did_you_mean
    names = sorted(e.name for e in client(uri).search_experiments())
    have = f" (it has {names})" if names else " (it has no experiments yet)"
    return EmbinitError(f"no MLflow experiment {name!r} in {resolve_uri(uri)}{have}{did_you_mean(name, names)}")


def search_runs(exp_id: str, uri: str | None = None, filter_string: str = "") -> list:
    """Every run of the experiment matching the filter (all pages)."""
    c, out, token = client(uri), [], None
    while True:
        page = c.search_runs([exp_id], filter_string=filter_string, max_results=1000, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def finished_keys(exp_id: str, uri: str | None = None) -> dict[str, str]:
    """trial key -> run id of its newest FINISHED child run."""
    runs = search_runs(exp_id, uri, "attributes.status = 'FINISHED'")
    out: dict[str, str] = {}
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        key = run.data.tags.get(KEY_TAG)
        if key:
            out[key] = run.info.run_id
    return out


def finished_run(exp_id: str, uri: str | None, key: str):
    """The newest FINISHED run of a trial key, or None."""
    runs = search_runs(exp_id, uri, f"tags.`{KEY_TAG}` = '{key}' and attributes.status = 'FINISHED'")
    return max(runs, key=lambda r: r.info.start_time or 0) if runs else None


def flat_params(config: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": str(vv) for kk, vv in flat_params(v).items()})
        else:
            out[k] = str(v)
    return out


def resolved_params(config: dict[str, Any]) -> dict[str, str]:
    """The flat params of a trial config with the task defaults filled in and unset options (None)
    left out, so the run table shows the values the trial trained with, not `None`."""
    from embinit.config import TrialConfig
    try:
        config = TrialConfig.from_dict(config).resolved().to_dict()
    except EmbinitError:
        pass  # not a TrialConfig (an older run's fields): log it as given
    return {k: v for k, v in flat_params(config).items() if v != "None"}


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


def finished_sweep(exp_id: str, uri: str, spec_hash: str) -> str | None:
    """The newest FINISHED sweep run of the spec `spec_hash`, or None: a rerun that trains nothing links
    it instead of adding an empty sweep run."""
    runs = search_runs(exp_id, uri, f"tags.`{KIND_TAG}` = 'sweep' and tags.`{SPEC_HASH_TAG}` = '{spec_hash}'"
                                    " and attributes.status = 'FINISHED'")
    return max(runs, key=lambda r: r.info.start_time or 0).info.run_id if runs else None


def start_parent_run(exp_id: str, uri: str, spec_hash: str, spec_yaml: str, n_trials: int,
                     run_name: str | None = None) -> str:
    """A sweep's run, named `run_name` (the spec's name), else `sweep-<spec hash>`."""
    c = client(uri)
    run = retry(lambda: c.create_run(exp_id, run_name=run_name or f"sweep-{spec_hash[:8]}",
                                     tags={SPEC_HASH_TAG: spec_hash, KIND_TAG: "sweep",
                                           N_TRIALS_TAG: str(n_trials)}))
    retry(lambda: c.log_text(run.info.run_id, spec_yaml, "spec.yaml"))
    return run.info.run_id


def end_parent_run(run_id: str, uri: str, status: str, report_md: str | None,
                   counts: dict[str, int], files: tuple[tuple[str, str], ...] = ()) -> None:
    """Close a sweep's parent run with its report (markdown, and `files`: (artifact dir, path))."""
    c = client(uri)
    if report_md:
        retry(lambda: c.log_text(run_id, report_md, "report.md"))
    for artifact_dir, path in files:
        retry(lambda a=artifact_dir, p=path: c.log_artifact(run_id, p, a))
    for name, value in counts.items():
        retry(lambda n=name, v=value: c.log_metric(run_id, f"sweep/{n}", v))
    retry(lambda: c.set_terminated(run_id, status=status))


def trial_records(exp_id: str, uri: str | None = None, filter_string: str = "") -> list[TrialRecord]:
    """The experiment's trial runs (matching the filter) as records, newest first."""
    return from_runs(search_runs(exp_id, uri, filter_string))


def experiment_records(experiment_name: str, tracking_uri: str | None = None) -> list[TrialRecord]:
    """Every trial run of the named experiment as a record; an error when there is no such experiment."""
    exp_id = experiment_id(experiment_name, tracking_uri)
    if exp_id is None:
        raise no_experiment(experiment_name, tracking_uri)
    return trial_records(exp_id, tracking_uri)


def trial_row(rec: TrialRecord) -> dict[str, Any]:
    """A record as a plain row: key, config, status, label, task, its reported metric and value, best
    epoch, run id, error text (failed runs)."""
    metric = primary_metric(rec.task) if rec.task in TASKS else None
    return {"key": rec.key, "config": rec.config, "status": rec.status, "label": rec.label, "task": rec.task,
            "metric": metric, "value": rec.metrics.get(metric) if metric else None,
            "best_epoch": rec.metrics.get("best_epoch"), "run_id": rec.run_id, "error": rec.error}


def list_trials(experiment_name: str, tracking_uri: str | None = None) -> list[dict[str, Any]]:
    """Every trial run of an experiment as a `trial_row`, newest first."""
    return [trial_row(r) for r in experiment_records(experiment_name, tracking_uri)]


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
        _log_batch(c, run_id, metrics=_metrics(metrics),
                   params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        retry(lambda: c.log_text(run_id, json.dumps(result, indent=1, default=str), "result.json"))
    except Exception as e:
        retry(lambda: c.set_terminated(run_id, "FAILED"))
        raise EmbinitError(f"could not record the {kind} run in MLflow: {e}") from e
    retry(lambda: c.set_terminated(run_id, "FINISHED"))
    return run_id


def analysis_runs(experiment: str, uri: str | None, kind: str) -> list:
    """The FINISHED runs of one analysis kind in an experiment (empty when the experiment is missing)."""
    exp_id = experiment_id(experiment, uri)
    if exp_id is None:
        return []
    return search_runs(exp_id, uri, f"tags.`{KIND_TAG}` = '{kind}' and attributes.status = 'FINISHED'")


def _metrics(values: dict[str, Any], step: int = 0, prefix: str = "") -> list:
    from mlflow.entities import Metric
    now = int(time.time() * 1000)
    out = []
    for k, v in flat_numbers(values).items():
        out.append(Metric(prefix + k, v, now, step))
    return out


def flat_numbers(values: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested dict, keys joined with '/'; bools and None dropped."""
    out: dict[str, float] = {}
    for k, v in values.items():
        if isinstance(v, dict):
            out.update(flat_numbers(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}{k}"] = float(v)
    return out


def _log_batch(c, run_id: str, metrics=(), params=(), tags=()) -> None:
    metrics = list(metrics)
    for i in range(0, max(len(metrics), 1), 900):  # the REST API caps a batch at 1000 entries
        chunk = metrics[i:i + 900]
        first = i == 0
        retry(lambda chunk=chunk, first=first: c.log_batch(run_id, metrics=chunk, params=params if first else (),
                                                           tags=tags if first else ()))


class TrialRun:
    """The MLflow child run of one trial, written from inside the trial's worker."""

    def __init__(self, uri: str, run_id: str, reopened: bool = False):
        self.uri, self.run_id, self.client = uri, run_id, client(uri)
        self.reopened = reopened         # an earlier attempt may have logged epochs this one did not
        self.logged: set[int] = set()    # epochs this process logged

    @classmethod
    def open(cls, uri: str, exp_id: str, parent_id: str | None, config: dict[str, Any], key: str,
             label: str, group: dict[str, Any], run_id: str | None = None,
             resumed_epoch: int | None = None) -> "TrialRun":
        """Reuse `run_id` (a restarted attempt, or an earlier sweep's run whose checkpoint this one resumes
        after `resumed_epoch`) or this sweep's unfinished run of the key; else create one."""
        c = client(uri)
        if run_id is None and parent_id is not None:
            runs = search_runs(exp_id, uri, f"tags.`{KEY_TAG}` = '{key}' and tags.`{PARENT_TAG}` = '{parent_id}'"
                                            " and attributes.status != 'FINISHED'")
            run_id = runs[0].info.run_id if runs else None
        if run_id is not None:
            cls._reopen(c, run_id, parent_id, resumed_epoch)
            return cls(uri, run_id, reopened=True)
        tags = {KEY_TAG: key, LABEL_TAG: label, INIT_TAG: label, TASK_TAG: config["task"],
                SEED_TAG: str(config["seed"]),
                STATUS_TAG: "running", CONFIG_TAG: json.dumps(config, sort_keys=True, default=str),
                GROUP_TAG: json.dumps(group, sort_keys=True, default=str)}
        if parent_id:
            tags[PARENT_TAG] = parent_id
        run = retry(lambda: c.create_run(exp_id, run_name=trial_run_name(label, config["seed"]), tags=tags))
        from mlflow.entities import Param
        params = [Param(k, v[:6000]) for k, v in trial_params(resolved_params(config), label).items()]
        _log_batch(c, run.info.run_id, params=params)
        return cls(uri, run.info.run_id)

    @staticmethod
    def _reopen(c, run_id: str, parent_id: str | None, resumed_epoch: int | None) -> None:
        """Running again, in the sweep `parent_id`, without the error an earlier close left on it."""
        from mlflow.entities import RunTag
        tags = [RunTag(STATUS_TAG, "running")] + ([RunTag(PARENT_TAG, parent_id)] if parent_id else [])
        if resumed_epoch is not None:
            tags.append(RunTag(RESUMED_TAG, str(resumed_epoch)))
        retry(lambda: c.update_run(run_id, status="RUNNING"))
        retry(lambda: c.log_batch(run_id, tags=tags))
        if ERROR_TAG in retry(lambda: c.get_run(run_id)).data.tags:
            retry(lambda: c.delete_tag(run_id, ERROR_TAG))

    def log_epoch(self, epoch: int, metrics: dict[str, Any], checkpoint: bool = False) -> None:
        """One epoch's metrics (step = epoch); `checkpoint`: the trial's kept folder now holds it."""
        from mlflow.entities import RunTag
        tags = [RunTag(CHECKPOINT_TAG, str(epoch))] if checkpoint else ()
        _log_batch(self.client, self.run_id, _metrics({k: v for k, v in metrics.items() if k != "epoch"},
                                                      step=epoch), tags=tags)
        self.logged.add(epoch)

    def log_model_size(self, model) -> None:
        """The model's size as params (`model_parameters`, `trainable_parameters`), logged when training
        starts: a running or failed trial has them too."""
        from mlflow.entities import Param
        counts = {"model_parameters": sum(p.numel() for p in model.parameters()),
                  "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}
        _log_batch(self.client, self.run_id, params=[Param(k, str(v)) for k, v in counts.items()])

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        """Metrics an analysis callback measured (`sim/*`, `probe/*`); step = optimizer step, not epoch."""
        _log_batch(self.client, self.run_id, _metrics(metrics, step=step))

    def logged_steps(self, name: str) -> set[int]:
        return {m.step for m in retry(lambda: self.client.get_metric_history(self.run_id, name))}

    def finish(self, result: dict[str, Any], artifacts: list[tuple[str, str]]) -> None:
        """Final metrics and tags of a returned trial (finished or diverged), then its artifacts."""
        # A resumed attempt's history holds epochs an earlier (dead) attempt may not have logged.
        logged = self.logged_steps("val/loss") | self.logged if self.reopened else self.logged
        missing = [h for h in result["history"] if h.get("epoch") not in logged]
        metrics = [m for h in missing for m in _metrics({k: v for k, v in h.items() if k != "epoch"},
                                                          step=h["epoch"])]
        metrics += _metrics(result.get("test") or {}) + _metrics(result.get("best") or {}, prefix="best/")
        metrics += _metrics(_key_emb_stats(result))
        extra = {"best_epoch": result.get("best_epoch"), "wall_time_s": result.get("wall_time_s"),
                 "diverged_step": result.get("diverged_step"), "coverage": result.get("coverage") or {}}
        metrics += _metrics(extra)
        from mlflow.entities import RunTag
        # The label tag stays the spec's (it may be a custom `name`); the trainer's goes beside it.
        tags = [RunTag(STATUS_TAG, result["status"]), RunTag(TRAINER_LABEL_TAG, result.get("label") or ""),
                RunTag(EXECUTION_TAG, ((result.get("info") or {}).get("execution") or {}).get("mode", "separate"))]
        if result.get("bleu_signature"):
            tags.append(RunTag(BLEU_SIGNATURE_TAG, result["bleu_signature"]))
        _log_batch(self.client, self.run_id, metrics=metrics, tags=tags)
        self._drop_checkpoint_tag()  # a result: nothing to resume
        retry(lambda: self.client.log_text(self.run_id, json.dumps(result, indent=1, default=str),
                                           "result.json"))
        table = emb_stats_table(result)
        if table["statistic"]:
            retry(lambda: self.client.log_table(self.run_id, table, "emb_stats.json"))
        for artifact_dir, path in artifacts:
            retry(lambda a=artifact_dir, p=path: self.client.log_artifact(self.run_id, p, a))
        retry(lambda: self.client.set_terminated(self.run_id, status="FINISHED"))

    def fail(self, error: str, status: str = "FAILED", tag: str | None = None, checkpoint: bool = True) -> None:
        """Record a failed (or cancelled: status KILLED) attempt with its error text; `tag` overrides
        the status tag (`interrupted`); `checkpoint=False`: its kept checkpoint is gone (not resumable)."""
        tag = tag or ("failed" if status == "FAILED" else "cancelled")
        retry(lambda: self.client.set_tag(self.run_id, STATUS_TAG, tag))
        if not checkpoint:
            self._drop_checkpoint_tag()
        retry(lambda: self.client.set_tag(self.run_id, ERROR_TAG, error[-4000:]))
        retry(lambda: self.client.log_text(self.run_id, error, "error.txt"))
        retry(lambda: self.client.set_terminated(self.run_id, status=status))

    def _drop_checkpoint_tag(self) -> None:
        """No checkpoint is kept: remove the tag rather than leave it empty (clutter in the run's tags)."""
        if CHECKPOINT_TAG in retry(lambda: self.client.get_run(self.run_id)).data.tags:
            retry(lambda: self.client.delete_tag(self.run_id, CHECKPOINT_TAG))


def _key_emb_stats(result: dict[str, Any]) -> dict[str, Any]:
    """The initial target table's KEY_EMB_STATS, prefixed `init/`."""
    init = result.get("emb_stats_init") or {}
    return {f"init/emb/{k}": init[f"emb/{k}"] for k in KEY_EMB_STATS if f"emb/{k}" in init}


def emb_stats_table(result: dict[str, Any]) -> dict[str, list]:
    """Every embedding statistic as columns table, statistic, init, best (one row per statistic, e.g.
    `emb/std`, `emb_src/absorption`), for `MlflowClient.log_table`."""
    init, best = result.get("emb_stats_init") or {}, result.get("emb_stats_best") or {}
    names = sorted(set(init) | set(best))
    return {"statistic": names, "init": [init.get(n) for n in names], "best": [best.get(n) for n in names]}


def close_orphans(exp_id: str, uri: str, parent_id: str, reason: str, status: str = "FAILED",
                  tag: str | None = None) -> int:
    """Mark this sweep's child runs still RUNNING (their worker died or was stopped) as failed,
    cancelled or (`tag`) interrupted. Returns how many."""
    runs = search_runs(exp_id, uri, f"tags.`{PARENT_TAG}` = '{parent_id}' and attributes.status = 'RUNNING'")
    for run in runs:
        close_run(uri, run, reason, status, tag)
    return len(runs)


def close_run(uri: str, run, reason: str, status: str = "FAILED", tag: str | None = None) -> None:
    """Close a trial run nothing writes to any more; one that keeps a checkpoint says it resumes."""
    kept = run.data.tags.get(CHECKPOINT_TAG, "")
    if kept.isdigit():
        reason += f"; its checkpoint after epoch {kept} is kept: running the spec again resumes this run"
    TrialRun(uri, run.info.run_id).fail(reason, status=status, tag=tag)


def close_sweeps(exp_id: str, uri: str, spec_hash: str, reason: str, status: str = "FAILED") -> int:
    """Close the sweep (parent) runs of a spec still RUNNING although their driver is gone: MLflow status
    `status`, `embinit.status` failed (cancelled when KILLED), the reason in `embinit.error`."""
    runs = search_runs(exp_id, uri, f"tags.`{KIND_TAG}` = 'sweep' and tags.`{SPEC_HASH_TAG}` = '{spec_hash}'"
                                    " and attributes.status = 'RUNNING'")
    c = client(uri)
    for run in runs:
        retry(lambda r=run: c.set_tag(r.info.run_id, STATUS_TAG, "failed" if status == "FAILED" else "cancelled"))
        retry(lambda r=run: c.set_tag(r.info.run_id, ERROR_TAG, reason))
        retry(lambda r=run: c.set_terminated(r.info.run_id, status=status))
    return len(runs)


def can_continue(uri: str, exp_id: str, key: str, run_id: str) -> bool:
    """Whether `run_id` is an unfinished, undeleted run of trial `key` in experiment `exp_id`."""
    try:
        run = retry(lambda: client(uri).get_run(run_id))
    except Exception:  # deleted for good, or never in this store
        return False
    return (run.info.experiment_id == str(exp_id) and run.info.lifecycle_stage == "active"
            and run.data.tags.get(KEY_TAG) == key and run.info.status != "FINISHED")
