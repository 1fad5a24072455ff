"""Ray for a sweep: an existing connection, the cluster at an address, or a local Ray started (and
stopped) for the purpose with token auth disabled and usage stats off."""

from __future__ import annotations

import logging
import os

from embinit.errors import EmbinitError


def default_env() -> None:
    """Ray's token auth off for a local cluster and no usage-stats reporting, unless set otherwise."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # MLflow is the record; Tune's JSON/CSV/TensorBoard loggers would only add per-result latency.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # Every epoch checkpoints, so Tune's "snapshotting too often" warning fires on short trials.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # embinit prints its own progress line; Tune's tables (new output engine) would interleave with it.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Ctrl-C is embinit's (sweep/interrupt.py): Tune's own handler would print a Tuner.restore hint,
    # while embinit resumes by running the spec again.
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")


class RayRuntime:
    def __init__(self, address: str | None = None):
        self.address, self.started = address, False

    def __enter__(self) -> "RayRuntime":
        default_env()
        import ray
        if ray.is_initialized():
            return self  # the caller (a service driver, a test) owns the connection
        try:
            ray.init(address=self.address, include_dashboard=False, ignore_reinit_error=True,
                     log_to_driver=os.environ.get("EMBINIT_RAY_LOGS", "0") == "1",
                     logging_level=logging.WARNING)
        except ConnectionError as e:
            raise EmbinitError(f"cannot connect to the Ray cluster at {self.address!r}: {e}") from None
        self.started = True
        return self

    def __exit__(self, *exc) -> None:
        if self.started:
            import ray
            ray.shutdown()
