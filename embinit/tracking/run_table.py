"""Reading many trial runs at once from a SQL store: the runs, their tags and their latest metrics in
three queries, without MLflow's ORM entities.

`MlflowClient.search_runs` builds every run's params, tags and metrics as ORM objects, then as MLflow
entities: ~7.7 ms per run (bench/bench_trial_writes.py measures it), so the report and the service's
`/trials` and `/results` of a 10,000-trial experiment took over a minute. A trial record needs only the
run's status, times and name, its tags and its latest metrics (`embinit.tracking.records.from_run`), which this reads as
plain rows from MLflow's own tables (`runs`, `tags`, `latest_metrics`, named through MLflow's SQLAlchemy
models, so a schema MLflow changes fails loudly here, not silently). Only for stores MLflow keeps in a SQL
database it reaches directly (`sqlite:`, `postgresql:`, ...); an `http://` tracking server is read with
`search_runs` (`rows` answers None). Both ways give the same records (tests/test_run_table.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from embinit.tracking.mlflow_store import resolve_uri, retry

_ENGINES: dict[str, Any] = {}
_LOCK = threading.Lock()


@dataclass
class RunInfo:
    run_id: str
    status: str
    start_time: int | None
    end_time: int | None
    run_name: str | None = None


@dataclass
class RunData:
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class RunRow:
    """What `records.from_run` reads of an MLflow `Run`, and no more."""
    info: RunInfo
    data: RunData


def _engine(uri: str):
    with _LOCK:
        if uri not in _ENGINES:
            import sqlalchemy
            kwargs = {"connect_args": {"timeout": 20}} if uri.startswith("sqlite:") else {"pool_pre_ping": True}
            _ENGINES[uri] = sqlalchemy.create_engine(uri, **kwargs)
        return _ENGINES[uri]


def is_sql_store(uri: str | None) -> bool:
    from embinit.tracking.store_check import is_database
    return is_database(resolve_uri(uri))


def rows(exp_id: str, uri: str | None, status: str | None = None, key: str | None = None) -> list[RunRow] | None:
    """Every active run of experiment `exp_id` (with MLflow status `status` when given: RUNNING,
    FINISHED, ...; of trial key `key` when given), newest first as `search_runs` orders them; None when the
    store is not a SQL database this process reaches (read it with `search_runs`).

    The key's lookup names the tag `embinit.trial_key` as a literal in the SQL, so the store's partial
    index on that tag's values (`embinit.tracking.prepare`) serves it in every plan. MLflow's search binds the
    tag's name as a parameter: once psycopg prepares the statement (its sixth run on a connection),
    PostgreSQL may keep a generic plan, which cannot use a partial index and reads every trial key of the
    experiment per lookup (a sweep's workers on PostgreSQL then ran at half speed, docs/benchmarks.md)."""
    uri = resolve_uri(uri)
    if not is_sql_store(uri):
        return None
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlRun, SqlTag
    from sqlalchemy import literal, select

    from embinit.tracking.records import KEY_TAG

    runs, tags = SqlRun.__table__, SqlTag.__table__
    wanted = [runs.c.experiment_id == int(exp_id), runs.c.lifecycle_stage == "active"]
    if status is not None:
        wanted.append(runs.c.status == status)
    if key is not None:
        wanted.append(runs.c.run_uuid.in_(select(tags.c.run_uuid).where(
            tags.c.key == literal(KEY_TAG, literal_execute=True), tags.c.value == key)))
    ids = select(runs.c.run_uuid).where(*wanted)

    def read() -> list[RunRow]:
        with _engine(uri).connect() as conn:  # one read transaction: the three queries agree
            out = {r.run_uuid: RunRow(RunInfo(r.run_uuid, r.status, r.start_time, r.end_time, r.name), RunData())
                   for r in conn.execute(select(runs.c.run_uuid, runs.c.status, runs.c.start_time,
                                                runs.c.end_time, runs.c.name).where(*wanted)
                                         .order_by(runs.c.start_time.desc(), runs.c.run_uuid))}
            for run_id, name, value in conn.execute(select(tags.c.run_uuid, tags.c.key, tags.c.value)
                                                    .where(tags.c.run_uuid.in_(ids))):
                if run_id in out:
                    out[run_id].data.tags[name] = value
            latest = SqlLatestMetric.__table__
            for run_id, name, value, is_nan in conn.execute(
                    select(latest.c.run_uuid, latest.c.key, latest.c.value, latest.c.is_nan)
                    .where(latest.c.run_uuid.in_(ids))):
                if run_id in out:
                    out[run_id].data.metrics[name] = float("nan") if is_nan else value
            return list(out.values())
    return retry(read)


@dataclass(frozen=True)
class Logged:
    """One logged value of a metric, as `MlflowClient.get_metric_history` gives it."""
    step: int
    timestamp: int
    value: float


def histories(uri: str | None, run_ids: list[str], metric: str) -> dict[str, list[Logged]] | None:
    """Every logged value of `metric` of each run, in the order `get_metric_history` gives them
    (timestamp, step, value), in one query per 500 runs instead of one call per run; None when the store
    is not a SQL database this process reaches."""
    uri = resolve_uri(uri)
    if not is_sql_store(uri):
        return None
    from mlflow.store.tracking.dbmodels.models import SqlMetric
    from sqlalchemy import select

    table = SqlMetric.__table__
    cols = table.c

    def read() -> dict[str, list[Logged]]:
        out: dict[str, list[Logged]] = {run_id: [] for run_id in run_ids}
        with _engine(uri).connect() as conn:
            for i in range(0, len(run_ids), 500):
                query = (select(cols.run_uuid, cols.step, cols.timestamp, cols.value, cols.is_nan)
                         .where(cols.key == metric, cols.run_uuid.in_(run_ids[i:i + 500]))
                         .order_by(cols.run_uuid, cols.timestamp, cols.step, cols.value))
                for run_id, step, timestamp, value, is_nan in conn.execute(query):
                    out[run_id].append(Logged(step, timestamp, float("nan") if is_nan else value))
        return out
    return retry(read)
