"""Response models of the API (what clients can rely on; the OpenAPI schema at /docs shows them)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
# A trial's state in the trial table: `pending` (no run), else its run's (`embinit.tracking.records.run_status`).
TrialStatus = Literal["pending", "running", "finished", "diverged", "failed", "cancelled", "interrupted"]


class MlflowLink(BaseModel):
    tracking_uri: str
    experiment_name: str
    experiment_id: str | None = None
    url: str | None = Field(None, description="the experiment in the MLflow UI, when its URL is configured")


class Links(BaseModel):
    status: str
    trials: str
    results: str


class ExperimentSummary(BaseModel):
    id: str
    name: str
    status: Status
    n_trials: int
    counts: dict[str, int] = Field(description="trials by state: pending, running, finished (trained by this "
                                               "experiment), failed (its run failed), reused (not trained by "
                                               "it: finished before it, or by another experiment sharing the "
                                               "key), cancelled (once a failed or cancelled experiment ended: "
                                               "stopped while running, or never started)")
    progress: float = Field(description="fraction of trials with a finished (trained or reused) or failed run, "
                                        "0..1; cancelled trials have none")
    eta_s: float | None = Field(None, description="estimated seconds left: from the sweep's epoch times as soon "
                                "as one epoch has ended, else from this run's trial rate")
    spec_hash: str
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    cancel_requested: bool = False
    error: str | None = None
    mlflow: MlflowLink
    links: Links


class ExperimentDetail(ExperimentSummary):
    spec: dict[str, Any]
    driver: str | None = Field(None, description="name of the Ray actor that drives the experiment")
    running_trials: list[dict[str, Any]] = Field(default_factory=list, description="the running trials as the "
                                                 "sweep sees them: trial, epoch (of the planned), best selection "
                                                 "metric so far, ETA")


class ExperimentPage(BaseModel):
    items: list[ExperimentSummary]
    total: int
    limit: int
    offset: int


class Submitted(BaseModel):
    id: str
    n_trials: int
    status: Status
    created: bool = Field(description="false when an experiment with the same spec already existed")
    spec_hash: str
    status_url: str
    results_url: str
    notices: list[str] = Field(default_factory=list, description="what to know about the submitted spec, "
                               "e.g. a model the trials will fetch from the Hugging Face hub")


class Trial(BaseModel):
    key: str
    status: TrialStatus = Field(description="pending (no run yet; cancelled or failed once a cancel or a "
                                            "failure ended the experiment before it started), running, finished, "
                                            "diverged (ran to its end with a non-finite loss: no number), failed, "
                                            "cancelled, interrupted (Ctrl-C of `embinit run`, or its driver was lost: "
                                            "it did not fail, and a rerun resumes it); a rerun trains all "
                                            "but finished and diverged ones again")
    label: str | None = None
    seed: int | None = None
    config: dict[str, Any]
    axes: dict[str, Any] = Field(default_factory=dict, description="the trial's ablation-axis values (the spec's "
                                 "`axes`), e.g. {\"train_embeddings\": false}; {} without axes")
    point: dict[str, Any] = Field(default_factory=dict, description="the trial's search point (the spec's "
                                  "`search.space` values it ran at), e.g. {\"lr\": 0.001}, as the MLflow run name "
                                  "and the report's row name show it; {} without a search, and for an Optuna "
                                  "trial not yet drawn")
    metric: str | None = Field(None, description="the task's reported metric, e.g. test/bleu")
    best_metric: float | None = None
    run_id: str | None = None
    run_name: str | None = Field(None, description="the run's name in the MLflow UI's run table, e.g. "
                                 "`Xavier-s0 lr=0.001` (label, seed, axes' and search point's values); null "
                                 "while the trial has no run")
    error: str | None = Field(None, description="why a failed, cancelled or interrupted trial stopped (its "
                                                "error, as MLflow keeps it), or that it never started")


class TrialPage(BaseModel):
    items: list[Trial]
    total: int
    limit: int
    offset: int


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    version: str
    database: str
    ray: str


class Problem(BaseModel):
    """One thing wrong with a request (service.problems says how `loc` is written)."""

    model_config = ConfigDict(extra="forbid")
    loc: str = Field(description="where: a spec field's path (`tasks[0].task`, `inits[2].transform`), a "
                                 "parameter (`query.limit`, `path.exp_id`), or \"\" for the whole request")
    msg: str = Field(description="what is wrong, naming the value sent")


class Problems(BaseModel):
    """The body of every 422: every problem found (at most EMBINIT_MAX_PROBLEMS, then how many more)."""

    detail: list[Problem]
