"""Ray for a sweep: an existing connection, the cluster at an address, or a local Ray started (and
stopped) for the purpose with token auth disabled and usage stats off."""

from __future__ import annotations

import logging
import os

from embinit.errors import EmbinitError


class RayRuntime:
    def __init__(self, address: str | None = None):
        self.address, self.started = address, False

    def __enter__(self) -> "RayRuntime":
        from embinit.sweep.runner import default_env
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
