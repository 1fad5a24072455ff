"""Rows of the state database as API responses: progress, ETA, links."""

from __future__ import annotations

from embinit.commands import runs_page
from embinit.redact import masked, scrubbed
from service.db import Experiment, utcnow
from service.schemas import ExperimentDetail, ExperimentSummary, Links, MlflowLink
from service.settings import Settings
from service.state import LIVE_KEYS


def progress(exp: Experiment) -> float:
    """The fraction of trials with an outcome: a finished run (trained or reused) or a failed one. A trial
    an ended experiment stopped or never started (`cancelled`, state.settle_counts) has none, so a failed
    or cancelled experiment shows how far it got, never 100% for trials it did not run."""
    c = exp.counts or {}
    done = c.get("finished", 0) + c.get("failed", 0) + c.get("reused", 0)
    return round(min(1.0, done / exp.n_trials), 4) if exp.n_trials else 1.0


def counts(exp: Experiment) -> dict[str, int]:
    return {k: v for k, v in (exp.counts or {}).items() if k not in LIVE_KEYS}


def eta_s(exp: Experiment) -> float | None:
    """Seconds left: the sweep's own estimate from epoch times (there as soon as one epoch has ended),
    counted down since it was stored; else this run's trial rate (reused trials cost nothing)."""
    c = exp.counts or {}
    live = c.get("eta_s")
    if exp.status == "running" and isinstance(live, (int, float)):
        since = (utcnow() - exp.updated_at).total_seconds() if exp.updated_at else 0.0
        return round(max(0.0, live - max(0.0, since)), 1)
    ran = c.get("finished", 0) + c.get("failed", 0)
    left = exp.n_trials - ran - c.get("reused", 0)
    if exp.status != "running" or not exp.started_at or ran == 0 or left <= 0:
        return 0.0 if exp.status == "succeeded" else None
    elapsed = (utcnow() - exp.started_at).total_seconds()
    return round(elapsed / ran * left, 1)


def links(exp_id: str) -> Links:
    base = f"/experiments/{exp_id}"
    return Links(status=base, trials=f"{base}/trials", results=f"{base}/results")


def mlflow_link(exp: Experiment, settings: Settings) -> MlflowLink:
    url = None
    if settings.mlflow_ui_url and exp.mlflow_experiment_id:
        url = runs_page(settings.mlflow_ui_url, exp.mlflow_experiment_id)   # the run table, not MLflow 3's GenAI page
    # a database URL's password stays in the service: any reader of the API would otherwise see it
    return MlflowLink(tracking_uri=masked(exp.tracking_uri), experiment_name=exp.mlflow_experiment,
                      experiment_id=exp.mlflow_experiment_id, url=url)


def summary(exp: Experiment, settings: Settings, detail: bool = False) -> ExperimentSummary:
    # a driver's error may quote a store's URL: the service's passwords stay in the service
    error = scrubbed(exp.error, [*settings.secret_uris(), exp.tracking_uri]) if exp.error else exp.error
    fields = dict(id=exp.id, name=exp.name, status=exp.status, n_trials=exp.n_trials,
                  counts=counts(exp), progress=progress(exp), eta_s=eta_s(exp), spec_hash=exp.spec_hash,
                  created_at=exp.created_at, updated_at=exp.updated_at, started_at=exp.started_at,
                  finished_at=exp.finished_at, cancel_requested=exp.cancel_requested_at is not None,
                  error=error, mlflow=mlflow_link(exp, settings), links=links(exp.id))
    if detail:
        running = (exp.counts or {}).get("running_trials") if exp.status == "running" else None
        return ExperimentDetail(**fields, spec=exp.spec, driver=exp.driver, running_trials=running or [])
    return ExperimentSummary(**fields)
