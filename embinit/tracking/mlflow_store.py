"""The MLflow store embinit talks to: its URI, a client, retries on SQLite's write lock, experiments,
paged searches and batched writes.

Everything embinit writes goes through `embinit.tracking.trial_run` (a trial's run) and
`embinit.tracking.run_writers` (sweep and analysis runs, closing runs nothing writes to any more);
everything it reads back goes through `embinit.tracking.run_readers`, as the frozen records of
`embinit.tracking.records` and `embinit.tracking.run_records`.
Creating or upgrading a SQL store before any of this opens it is `embinit.tracking.prepare`'s.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from embinit.errors import EmbinitError
from embinit.redact import masked

DEFAULT_URI = "sqlite:///mlflow.db"


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


def moved_artifacts(artifact_uri: str, uri: str | None) -> str:
    """A run's `file:` artifact URI as found in a SQLite store that moved with its artifacts beside it
    (docs/reproduction/runs, committed and read from another checkout): MLflow records absolute paths,
    so when the recorded folder is gone, the same path under this store's own `mlartifacts/` is
    answered if it exists there. Any other URI, or one that still exists, comes back unchanged."""
    root = artifact_root(resolve_uri(uri))
    if root is None or not artifact_uri.startswith("file://"):
        return artifact_uri
    from urllib.parse import unquote, urlparse
    recorded = Path(unquote(urlparse(artifact_uri).path))
    if recorded.exists() or "mlartifacts" not in recorded.parts:
        return artifact_uri
    parts = recorded.parts
    below = parts[len(parts) - parts[::-1].index("mlartifacts"):]   # after the last mlartifacts/
    here = Path(unquote(urlparse(root).path)).joinpath(*below)
    return here.as_uri() if here.exists() else artifact_uri


def telemetry_off() -> None:
    """MLflow 3 reports usage (what was called, how long it took) to its maintainers' server from every
    process that logs, unless told not to; embinit's trial workers, drivers and API do not, as they do not
    report Ray's usage either. A user's own MLFLOW_DISABLE_TELEMETRY=false is kept."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def client(uri: str | None = None):
    from mlflow import MlflowClient  # mlflow import costs ~1 s; only trackers pay it
    # No "View run" link printed when a run is closed against a tracking server: two lines per trial in
    # the workers' logs, and a `get_run` call before each close.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    telemetry_off()
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
            # the kind tag marks it a model-training experiment; MLflow 3.17's UI still opens it on the
            # GenAI overview, so the links embinit prints go to its run table (commands.runs_page)
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
    return EmbinitError(f"no MLflow experiment {name!r} in {masked(resolve_uri(uri))}{have}{did_you_mean(name, names)}")


def search_runs(exp_id: str, uri: str | None = None, filter_string: str = "") -> list:
    """Every run of the experiment matching the filter (all pages), newest first."""
    c, out, token = client(uri), [], None
    while True:
        page = c.search_runs([exp_id], filter_string=filter_string, max_results=1000, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
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


def metrics_at(values: dict[str, Any], step: int = 0, prefix: str = "") -> list:
    """MLflow `Metric`s of the numeric leaves of `values` (`flat_numbers`), at `step`, timestamped now."""
    from mlflow.entities import Metric
    now = int(time.time() * 1000)
    return [Metric(prefix + k, v, now, step) for k, v in flat_numbers(values).items()]


def log_batch(c, run_id: str, metrics=(), params=(), tags=()) -> None:
    """One `log_batch` per 900 metrics (the REST API caps a batch at 1000 entries); params and tags go
    with the first."""
    metrics = list(metrics)
    for i in range(0, max(len(metrics), 1), 900):
        chunk = metrics[i:i + 900]
        first = i == 0
        retry(lambda chunk=chunk, first=first: c.log_batch(run_id, metrics=chunk, params=params if first else (),
                                                           tags=tags if first else ()))
