"""The API's own follow-up of unfinished experiments, without waiting for a reader.

Every `monitor_interval_s` a thread reconciles each queued or running experiment (service.state): a driver
that finished is recorded and released at once (it holds ~350 MB until then), and the MLflow runs of one
that failed are closed. Reads still refresh on their own, at most every `refresh_interval_s`.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("embinit.service")


class Monitor:
    def __init__(self, sessions, reconciler, interval_s: float):
        self.sessions, self.reconciler, self.interval_s = sessions, reconciler, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._loop, daemon=True, name="embinit-monitor")
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                with self.sessions() as session:
                    self.reconciler.refresh_active(session)
            except Exception:  # the next round tries again; reads still refresh on their own
                log.warning("could not follow up the unfinished experiments", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
