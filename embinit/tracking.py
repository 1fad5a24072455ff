"""Everything embinit writes to and reads from MLflow.

Layout: one MLflow experiment per spec name; one parent run per sweep submission; one child run per
trial, created by the trial itself inside its Ray worker (so no driver-side logger can lose the tracking
URI or stage artifacts on the wrong machine). A child run carries:
- tags `embinit.trial_key`, `embinit.label` (paper label), `embinit.task`, `embinit.seed`,
  `embinit.status` (running | finished | diverged | failed), `embinit.config` (the config as JSON),
  `embinit.error` for failures, `mlflow.parentRunId`;
- params: the flat trial config;
- metrics: per epoch (step = epoch) `train/loss`, `val/loss`, `val/<metric>`, `tokens_per_s`, ...; at the
  end `test/*`, `best/<val metric>`, `best_epoch`, `init/emb/*` and `best/emb/*` statistics; with the
  spec's `analyses`, `sim/*` and `probe/*` at optimizer steps, `init/probe/*` and `best/probe/*`.
A trial's key has a result when it has a FINISHED run (diverged runs are finished results).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from embinit.config import TASKS
from embinit.errors import EmbinitError

DEFAULT_URI = "sqlite:///mlflow.db"
KEY_TAG, LABEL_TAG, STATUS_TAG = "embinit.trial_key", "embinit.label", "embinit.status"
TASK_TAG, SEED_TAG, CONFIG_TAG, ERROR_TAG = "embinit.task", "embinit.seed", "embinit.config", "embinit.error"
SPEC_HASH_TAG, PARENT_TAG = "embinit.spec_hash", "mlflow.parentRunId"
EXECUTION_TAG = "embinit.execution"  # separate | fused (the trial's result.json has the group)
GROUP_TAG = "embinit.group"  # JSON of the ablation-axis and search-point values (report grouping)


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
    from mlflow import MlflowClient  # noqa: PLC0415 (mlflow import costs ~1 s; only trackers pay it)
    return MlflowClient(tracking_uri=resolve_uri(uri))


def retry(fn: Callable[[], Any], attempts: int = 8) -> Any:
    """Retry a store call that lost a race for SQLite's write lock (concurrent trials)."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 (mlflow wraps sqlalchemy errors in several types)
            if "locked" not in str(e).lower() or i == attempts - 1:
                raise
            time.sleep(0.05 * 2 ** i)


def ensure_experiment(name: str, uri: str | None = None) -> str:
    """The experiment id for `name`, created (artifacts beside a SQLite store) if needed."""
    c, uri = client(uri), resolve_uri(uri)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        try:
            return retry(lambda: c.create_experiment(name, artifact_location=_exp_artifacts(uri, name)))
        except Exception:  # noqa: BLE001 (a concurrent creator won the race)
            exp = c.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        raise EmbinitError(f"MLflow experiment {name!r} is deleted; restore it or choose another name")
    return exp.experiment_id


def _exp_artifacts(uri: str, name: str) -> str | None:
    root = artifact_root(uri)
    return f"{root}/{name}" if root else None


def experiment_id(name: str, uri: str | None = None) -> str | None:
    exp = client(uri).get_experiment_by_name(name)
    return exp.experiment_id if exp is not None else None


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


def primary_metric(task: str) -> str:
    """The number Table 1 reports for a task: test BLEU at the best-val-loss epoch for translation,
    test perplexity for LMs, the best validation (dev) metric for classification."""
    defaults = TASKS[task]
    return f"best/val/{defaults.metric}" if defaults.kind == "classification" else f"test/{defaults.metric}"


def selection_metric(task: str) -> tuple[str, str]:
    """(validation metric, mode) a search selects points by: val loss for translation (the paper picks
    checkpoints by it), the reported validation metric otherwise."""
    defaults = TASKS[task]
    if defaults.kind == "translation":
        return "val/loss", "min"
    return f"val/{defaults.metric}", "min" if defaults.metric == "ppl" else "max"


def reported_metrics(task: str) -> list[str]:
    """Every metric the report shows for a task (MNLI: matched and mismatched)."""
    first = primary_metric(task)
    return [first, first.replace("_matched", "_mismatched")] if first.endswith("_matched") else [first]


def flat_params(config: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": str(vv) for kk, vv in flat_params(v).items()})
        else:
            out[k] = str(v)
    return out


def start_parent_run(exp_id: str, uri: str, spec_hash: str, spec_yaml: str, n_trials: int) -> str:
    c = client(uri)
    run = retry(lambda: c.create_run(exp_id, run_name=f"sweep-{spec_hash[:8]}",
                                     tags={SPEC_HASH_TAG: spec_hash, "embinit.kind": "sweep",
                                           "embinit.n_trials": str(n_trials)}))
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


def list_trials(experiment_name: str, tracking_uri: str | None = None) -> list[dict[str, Any]]:
    """Every trial run of an experiment: key, config, status, label, its reported metric and value,
    run id, error text (failed runs)."""
    exp_id = experiment_id(experiment_name, tracking_uri)
    if exp_id is None:
        raise EmbinitError(f"no MLflow experiment {experiment_name!r} in {resolve_uri(tracking_uri)}")
    out = []
    for run in search_runs(exp_id, tracking_uri):
        tags = run.data.tags
        if KEY_TAG not in tags:
            continue  # a sweep's parent run
        task = tags.get(TASK_TAG, "")
        metric = primary_metric(task) if task in TASKS else None
        out.append({"key": tags[KEY_TAG], "config": json.loads(tags.get(CONFIG_TAG, "{}")),
                    "status": run_status(run), "label": tags.get(LABEL_TAG), "task": task,
                    "metric": metric, "value": run.data.metrics.get(metric) if metric else None,
                    "best_epoch": run.data.metrics.get("best_epoch"), "run_id": run.info.run_id,
                    "error": tags.get(ERROR_TAG)})
    return out


def log_analysis_run(experiment: str, uri: str | None, kind: str, run_name: str, params: dict[str, Any],
                     metrics: dict[str, float], result: dict[str, Any]) -> str:
    """Record one analysis outside a sweep (e.g. Table 4's analogies) as a FINISHED MLflow run: `params`,
    `metrics`, the full `result` as the artifact result.json, tag embinit.kind=`kind`. Returns the run id."""
    c, uri = client(uri), resolve_uri(uri)
    exp_id = ensure_experiment(experiment, uri)
    run = retry(lambda: c.create_run(exp_id, run_name=run_name, tags={"embinit.kind": kind}))
    run_id = run.info.run_id
    from mlflow.entities import Param  # noqa: PLC0415
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
    return search_runs(exp_id, uri, f"tags.`embinit.kind` = '{kind}' and attributes.status = 'FINISHED'")


def run_status(run) -> str:
    """finished | diverged | failed | cancelled | running, from MLflow's run status and embinit's tag."""
    status = run.info.status
    if status == "FINISHED":
        return "diverged" if run.data.tags.get(STATUS_TAG) == "diverged" else "finished"
    return {"FAILED": "failed", "KILLED": "cancelled"}.get(status, "running")


def _metrics(values: dict[str, Any], step: int = 0, prefix: str = "") -> list:
    from mlflow.entities import Metric  # noqa: PLC0415
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
        retry(lambda: c.log_batch(run_id, metrics=chunk, params=params if i == 0 else (),
                                  tags=tags if i == 0 else ()))


class TrialRun:
    """The MLflow child run of one trial, written from inside the trial's worker."""

    def __init__(self, uri: str, run_id: str, reopened: bool = False):
        self.uri, self.run_id, self.client = uri, run_id, client(uri)
        self.reopened = reopened         # an earlier attempt may have logged epochs this one did not
        self.logged: set[int] = set()    # epochs this process logged

    @classmethod
    def open(cls, uri: str, exp_id: str, parent_id: str | None, config: dict[str, Any], key: str,
             label: str, group: dict[str, Any], run_id: str | None = None) -> "TrialRun":
        """Reuse `run_id` (a restarted attempt) or this sweep's unfinished run of the key; else create."""
        c = client(uri)
        if run_id is None and parent_id is not None:
            runs = search_runs(exp_id, uri, f"tags.`{KEY_TAG}` = '{key}' and tags.`{PARENT_TAG}` = '{parent_id}'"
                                            " and attributes.status != 'FINISHED'")
            run_id = runs[0].info.run_id if runs else None
        if run_id is not None:
            retry(lambda: c.update_run(run_id, status="RUNNING"))
            retry(lambda: c.set_tag(run_id, STATUS_TAG, "running"))
            return cls(uri, run_id, reopened=True)
        tags = {KEY_TAG: key, LABEL_TAG: label, TASK_TAG: config["task"], SEED_TAG: str(config["seed"]),
                STATUS_TAG: "running", CONFIG_TAG: json.dumps(config, sort_keys=True, default=str),
                GROUP_TAG: json.dumps(group, sort_keys=True, default=str)}
        if parent_id:
            tags[PARENT_TAG] = parent_id
        run = retry(lambda: c.create_run(exp_id, run_name=f"{config['task']}-{label}-s{config['seed']}",
                                         tags=tags))
        from mlflow.entities import Param  # noqa: PLC0415
        params = [Param(k, v[:6000]) for k, v in flat_params(config).items()]
        _log_batch(c, run.info.run_id, params=params)
        return cls(uri, run.info.run_id)

    def log_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        _log_batch(self.client, self.run_id, _metrics({k: v for k, v in metrics.items() if k != "epoch"},
                                                      step=epoch))
        self.logged.add(epoch)

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
        metrics += _metrics(_initial_best(result))
        extra = {"best_epoch": result.get("best_epoch"), "wall_time_s": result.get("wall_time_s"),
                 "diverged_step": result.get("diverged_step"), "coverage": result.get("coverage") or {}}
        metrics += _metrics(extra)
        from mlflow.entities import RunTag  # noqa: PLC0415
        # The label tag stays the spec's (it may be a custom `name`); the trainer's goes beside it.
        tags = [RunTag(STATUS_TAG, result["status"]), RunTag("embinit.trainer_label", result.get("label") or ""),
                RunTag(EXECUTION_TAG, ((result.get("info") or {}).get("execution") or {}).get("mode", "separate"))]
        if result.get("bleu_signature"):
            tags.append(RunTag("embinit.bleu_signature", result["bleu_signature"]))
        _log_batch(self.client, self.run_id, metrics=metrics, tags=tags)
        retry(lambda: self.client.log_text(self.run_id, json.dumps(result, indent=1, default=str),
                                           "result.json"))
        for artifact_dir, path in artifacts:
            retry(lambda a=artifact_dir, p=path: self.client.log_artifact(self.run_id, p, a))
        retry(lambda: self.client.set_terminated(self.run_id, status="FINISHED"))

    def fail(self, error: str, status: str = "FAILED") -> None:
        """Record a failed (or cancelled: status KILLED) attempt with its error text."""
        tag = "failed" if status == "FAILED" else "cancelled"
        retry(lambda: self.client.set_tag(self.run_id, STATUS_TAG, tag))
        retry(lambda: self.client.set_tag(self.run_id, ERROR_TAG, error[-4000:]))
        retry(lambda: self.client.log_text(self.run_id, error, "error.txt"))
        retry(lambda: self.client.set_terminated(self.run_id, status=status))


def _initial_best(result: dict[str, Any]) -> dict[str, Any]:
    """Embedding statistics at init and at the best epoch, prefixed `init/` and `best/`."""
    return {**{f"init/{k}": v for k, v in (result.get("emb_stats_init") or {}).items()},
            **{f"best/{k}": v for k, v in (result.get("emb_stats_best") or {}).items()}}


def close_orphans(exp_id: str, uri: str, parent_id: str, reason: str, status: str = "FAILED") -> int:
    """Mark this sweep's child runs still RUNNING (their worker died or was stopped) as failed or
    cancelled. Returns how many."""
    runs = search_runs(exp_id, uri, f"tags.`{PARENT_TAG}` = '{parent_id}' and attributes.status = 'RUNNING'")
    for run in runs:
        TrialRun(uri, run.info.run_id).fail(reason, status=status)
    return len(runs)
