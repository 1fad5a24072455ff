"""The service's settings, from the environment (prefix `EMBINIT_`) or a `.env` file.

Every knob a deployment sets lives here; `docker-compose.yml` sets only names that exist in this class
(a test checks it). Lists are given as JSON in the environment: `EMBINIT_DATA_ROOTS='["/data"]'`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from embinit.bounds import setting_default


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EMBINIT_", env_file=".env", extra="ignore")

    # Where the service keeps its own state (experiments, their spec, status, counts). SQLite file by
    # default; any SQLAlchemy URL works, e.g. postgresql+psycopg://user:pw@host/db.
    database_url: str = "sqlite:///embinit-state.db"
    # The MLflow store every experiment logs to; specs may not point elsewhere.
    tracking_uri: str = "sqlite:///mlflow.db"
    # The database behind `tracking_uri` when that is an `mlflow server` (e.g.
    # postgresql+psycopg://mlflow@db/mlflow): the API then reads trial runs from it directly, ~30x faster
    # than through the server's REST API (at 10,000 trials a read through the server outlasts
    # `mlflow_timeout_s`). None: read through `tracking_uri`.
    tracking_read_uri: str | None = None
    # With `tracking_read_uri` set: the trials write their runs' records (params, metrics, tags) to that
    # database directly too, and only their artifacts through the server: the server's CPU bounds a sweep
    # of short trials otherwise (docs/deployment.md). The Ray nodes must reach the database. False: every
    # write goes through the server.
    tracking_write_direct: bool = False
    # Base URL of an MLflow UI on the same store, used to build each experiment's link (None: no link).
    mlflow_ui_url: str | None = None
    # Ray: None starts a local Ray inside the API process; "ray://head:10001" (Ray Client) or
    # "host:6379" / "auto" (when this machine is a node of the cluster) use an existing cluster.
    ray_address: str | None = None
    # IP of this machine's Ray node when it joins a cluster with a GCS address (loopback clusters).
    ray_node_ip: str | None = None
    ray_namespace: str = "embinit"

    # Security. With a token set, writes need `Authorization: Bearer <token>`; reads too when
    # `reads_require_token` is true.
    api_token: str | None = None
    reads_require_token: bool = False
    # Specs may name data and pretrained files only inside these folders (relative paths in a spec are
    # looked up inside them). Empty: no local files may be named at all. `tune_configs` (the bundled
    # specs' folder, relative to the working directory like the others) is a default pretrained root so
    # a bundled spec posted as-is finds its files: `./data/synthetic_vectors.txt` is relative to it, when
    # the API starts in the checkout's root. A relative root is made absolute against the working
    # directory the settings are read in (the API's start), and kept so: the 422s, the start-up log and
    # the drivers' trusted roots name the same folders, whatever a later working directory.
    data_roots: list[Path] = Field(default_factory=lambda: [Path("data")], validate_default=True)
    pretrained_roots: list[Path] = Field(default_factory=lambda: [Path("pretrained"), Path("tune_configs")],
                                        validate_default=True)

    # Limits, each answered with a clear 4xx (413, 422, 429).
    max_body_bytes: int = Field(256 * 1024, ge=1)
    # Seconds a client gets to send a whole request body (408 after that), so slow bodies cannot hold
    # connections open.
    body_timeout_s: float = Field(10.0, gt=0)
    # `embinit serve`'s HTTP server (service/serving.py): a connection whose request headers are not
    # complete this many seconds after they began (or after it opened) is closed; an idle keep-alive
    # connection is closed after `keep_alive_s`; beyond `max_connections` open connections or requests,
    # new requests get 503.
    header_timeout_s: float = Field(10.0, gt=0)
    keep_alive_s: int = Field(5, ge=0)
    max_connections: int = Field(1000, ge=1)
    max_trials_per_experiment: int = Field(2000, ge=1)
    max_active_experiments: int = Field(4, ge=1)
    max_page_size: int = Field(200, ge=1)
    # Bounds on what one trial may ask for (a 422 names the field): per-trial values beyond these would
    # hold the cluster for days or oversubscribe a node. Set them to what the cluster is sized for. The
    # defaults (and the hard limits no setting lifts) are declared once, in embinit.bounds.BOUNDS.
    max_epochs: int = setting_default("max_epochs")
    max_d_model: int = setting_default("max_d_model")
    max_layers: int = setting_default("max_layers")
    max_ff_dim: int = setting_default("max_ff_dim")
    max_len: int = setting_default("max_len")
    max_retries: int = setting_default("max_retries")
    max_lr: float = setting_default("max_lr")
    max_batch_size: int = setting_default("max_batch_size")
    max_batch_tokens: int = setting_default("max_batch_tokens")
    max_beam_size: int = setting_default("max_beam_size")
    min_cpus_per_trial: float = Field(0.25, gt=0)
    # Refuse (422) a spec whose trials need more CPUs or GPUs than any node of the cluster has. Turn off
    # on an autoscaling cluster, where bigger nodes appear on demand.
    check_cluster_resources: bool = True
    # Validation costs CPU in proportion to the spec: lists are capped before the spec is validated,
    # and a 422 lists at most `max_problems` problems (then says how many more there were).
    max_list_items: int = Field(1000, ge=1)
    max_problems: int = Field(50, ge=1)   # 0 or less: a 422 listed none, or cut the last

    # How often a non-finished experiment's state is refreshed from Ray/MLflow on read (seconds);
    # reads in between are served from the state database.
    refresh_interval_s: float = Field(2.0, ge=0)
    # How often the API itself follows up unfinished experiments (seconds; 0: only on read), so a finished
    # driver is released and a failed one's MLflow runs closed without anyone reading (service.monitor).
    monitor_interval_s: float = Field(10.0, ge=0)
    # Seconds after its start during which a driver Ray does not know yet by name counts as starting, not
    # as lost (Ray Client creates actors asynchronously; service.runner); also how long a just-submitted
    # experiment whose driver is being started (no driver name yet) is left unjudged (service.state).
    driver_start_grace_s: float = Field(30.0, ge=0)
    # Seconds between two lookups that miss a driver before it is judged gone (a single miss may be a Ray
    # Client connection in trouble; being gone fails the experiment and closes its running MLflow runs).
    driver_gone_confirm_s: float = Field(10.0, ge=0)
    # Seconds a cancelled driver gets to stop its trials before it is killed.
    cancel_grace_s: float = Field(30.0, ge=0)
    # Seconds an MLflow read of the API may take (a slow or absent tracking server: 503 with Retry-After
    # after that), and how many such reads run at once (their own threads, never the database's).
    mlflow_timeout_s: float = Field(10.0, gt=0)
    mlflow_max_concurrency: int = Field(8, ge=1)
    # One API per state database (service.lease): its lease lapses this long after its last heartbeat
    # (renewed every third of it); a second API refuses to start, after waiting up to `lease_wait_s`.
    lease_ttl_s: float = Field(30.0, gt=0)
    lease_wait_s: float = Field(0.0, ge=0)

    @field_validator("data_roots", "pretrained_roots")
    @classmethod
    def _absolute(cls, roots: list[Path]) -> list[Path]:
        """Each root as an absolute path, joined to the working directory as written (no `..` collapsed,
        no symlink followed: service.paths follows them when it checks, as it did the relative root)."""
        return [root if root.is_absolute() else Path.cwd() / root for root in roots]

    def secret_uris(self) -> list[str | None]:
        """The URLs whose passwords the service holds: kept out of every answer and log line
        (`embinit.redact.scrubbed`)."""
        return [self.database_url, self.tracking_uri, self.tracking_read_uri]


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (a FastAPI dependency; tests override it)."""
    return Settings()
