"""The body of an experiment's Ray driver actor (`ExperimentDriver`, started by service.runner): it
calls `embinit.sweep.run_sweep` in a thread and answers `poll()` / `cancel()` meanwhile; the state it
reports (`DriverState`) and its counts in the API's terms. Each trial's run names the node and host that
trained it (`embinit.tracking.trial_run` writes it, as for any sweep)."""

from __future__ import annotations

import functools
import logging
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger("embinit.service")


@dataclass
class DriverState:
    """What a driver knows about its experiment."""

    status: str                                   # queued | running | succeeded | failed | cancelled
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    node: str | None = None                       # where the driver runs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Tune pickles its run config (stopper, callbacks) into tuner.pkl, so what the sweep gets must not hold a
# lock: it gets picklable `partial`s naming the driver, which look the live driver up here.
_DRIVERS: dict[str, "ExperimentDriver"] = {}


def _should_stop(name: str) -> bool:
    driver = _DRIVERS.get(name)
    return driver is not None and driver.stop.is_set()


def _on_progress(name: str, counts: dict[str, Any]) -> None:
    driver = _DRIVERS.get(name)
    if driver is not None:
        driver.progress(counts)


def final_counts(result) -> dict[str, int]:
    """A finished sweep's counts: `finished` only what this sweep trained; a key finished before it, or
    by another experiment sharing it while this one waited, is `reused`."""
    reused = result.reused + result.shared
    return {"pending": 0, "running": 0, "finished": result.n_finished - reused, "failed": result.n_failed,
            "reused": reused}


def failure_reasons(trials: list[dict[str, Any]], most: int = 3) -> str:
    """The failed trials' reasons (each error's last line, as the report counts them), most common first:
    what a researcher reads in `GET /experiments/{id}` before opening MLflow."""
    from embinit.report.rows import failure_reason
    from service.specs import api_terms

    reasons = Counter(failure_reason(api_terms(t.get("error"))) for t in trials if t.get("status") == "failed")
    parts = [f"{r} ({n} trial{'s' if n > 1 else ''})" for r, n in reasons.most_common(most)]
    if len(reasons) > most:
        parts.append(f"and {len(reasons) - most} other reasons")
    return "; ".join(parts)


def _all_failed(failed: int, reused: int) -> str:
    """`all 4 trials failed`, `the 1 trial failed`; with trials reused from earlier sweeps, those it
    trained (`all 1 trials failed` read as if nothing had a result)."""
    head = f"all {failed} trials" if failed != 1 else "the 1 trial"
    if not reused:
        return f"{head} failed"
    more = ("1 more was reused from an earlier sweep" if reused == 1 else
            f"{reused} more were reused from earlier sweeps")
    return f"{head} it trained failed ({more})"


def final_state(result, cancelled: bool) -> tuple[str, str | None]:
    """(status, error) of a finished sweep: succeeded only when every planned trial has a finished run
    (trained now or reused), so a sweep that lost trials never passes for a complete one; and then
    whether or not a cancel was asked for (it came after the last trial: nothing was cancelled)."""
    failed, ran = result.n_failed, result.planned - result.reused
    if result.n_finished >= result.planned:
        return "succeeded", None
    if result.cancelled or cancelled:
        return "cancelled", None
    if failed and failed >= ran:
        return "failed", f"{_all_failed(failed, result.reused)}: {failure_reasons(result.trials)}"
    missing = result.planned - result.n_finished - failed
    parts = [f"{failed} failed"] if failed else []
    parts += [f"{missing} {'has' if missing == 1 else 'have'} no finished run"] if missing else []
    reasons = f"; failures: {failure_reasons(result.trials)}" if failed else ""
    reasons += tune_reasons(getattr(result, "tune_errors", None) or [])
    return "failed", (f"only {result.n_finished} of {result.planned} trials finished ({', '.join(parts)}; "
                      f"see MLflow){reasons}; submit again with ?rerun=true to run the rest")


def tune_reasons(errors: list[str], most: int = 3) -> str:
    """Why Tune gave trials up (`name: last line of its error`), most common first: a trial that failed
    before its MLflow run existed (seen: a Ray node without the object store's AWS_ENDPOINT_URL, whose
    claim on its key failed) has no run to say so, and read only "have no finished run; see MLflow"."""
    if not errors:
        return ""
    from embinit.errors import EmbinitError
    from service.specs import api_terms

    # one reason per shape: the same error for other keys (a quoted URL or path of each) counts once
    reasons, first = Counter(), {}
    for e in errors:
        reason = api_terms(e.split(": ", 1)[-1]).removeprefix(f"{EmbinitError.__module__}.EmbinitError: ")
        reason = reason if len(reason) <= 800 else reason[:799] + "…"   # ours name their fix at the end
        shape = re.sub(r'"[^"]*"' + r"|'[^']*'", "…", reason)
        reasons[shape] += 1
        first.setdefault(shape, reason)
    parts = [f"{first[r]} ({n} trial{'s' if n > 1 else ''})" for r, n in reasons.most_common(most)]
    if len(reasons) > most:
        parts.append(f"and {len(reasons) - most} other reasons")
    return f"; Tune gave up on {len(errors)} trial{'s' if len(errors) > 1 else ''}: {'; '.join(parts)}"


def live_counts(counts: dict[str, Any]) -> dict[str, Any]:
    """The sweep's ETA (from epoch times, before any trial ends) and its running trials' rows, carried
    with the counts to the state database (service.views shows them as `eta_s` and `running_trials`)."""
    out: dict[str, Any] = {"running_trials": list(counts["trials"])} if "trials" in counts else {}
    if counts.get("eta_s") is not None:
        out["eta_s"] = round(float(counts["eta_s"]), 1)
    return out


class ExperimentDriver:
    """The Ray actor body. Runs the sweep in a thread so poll/cancel answer while it trains."""

    def __init__(self, name: str, spec: dict[str, Any], tracking_uri: str, trial_keys: list[str],
                 store_uri: str | None = None):
        import ray

        self.name, self.spec, self.tracking_uri, self.keys = name, spec, tracking_uri, trial_keys
        self.store_uri = store_uri   # the database behind the tracking server, written directly (or None)
        _DRIVERS[name] = self
        self.stop = threading.Event()
        self.state = DriverState("queued", node=ray.util.get_node_ip_address())
        threading.Thread(target=self._run, daemon=True, name="embinit-sweep").start()

    def _run(self) -> None:
        from embinit.spec import load_spec
        from embinit.sweep import run_sweep
        from service.specs import DATA_ADVICE

        self.state.started_at = time.time()  # still `queued` until a trial starts (resources permitting)
        # Ray wraps a worker's stderr in an object cloudpickle cannot pickle, and Tune pickles callbacks
        # that keep a reference to sys.stderr (the sweep's progress printer): use the plain stream.
        sys.stderr = getattr(sys.stderr, "stream", sys.stderr)
        try:
            result = run_sweep(load_spec(self.spec), tracking_uri=self.tracking_uri,
                               progress=functools.partial(_on_progress, self.name),
                               stop=functools.partial(_should_stop, self.name),
                               store_uri=self.store_uri, advice=DATA_ADVICE)   # a trial's no-data advice: the service's
            self.state.counts = final_counts(result)
            self.state.status, self.state.error = final_state(result, self.stop.is_set())
        except BaseException as e:  # any failure must end as a recorded state
            log.exception("experiment driver failed")
            self.state.status = "cancelled" if self.stop.is_set() else "failed"
            self.state.error = f"{type(e).__name__}: {e}".splitlines()[0][:2000]
        finally:
            self.state.finished_at = time.time()

    def progress(self, counts: dict[str, Any]) -> None:
        """The sweep's progress sink (called on every trial start/end): counts in the API's terms."""
        if self.state.status == "queued" and (counts["running"] or counts["done"] > counts["reused"]
                                              or counts["failed"]):
            self.state.status = "running"
        self.state.counts = {"pending": counts["pending"], "running": counts["running"],
                             "finished": counts["done"] - counts["reused"], "failed": counts["failed"],
                             "reused": counts["reused"], **live_counts(counts)}

    def poll(self) -> dict[str, Any]:
        return self.state.to_dict()

    def cancel(self) -> None:
        self.stop.set()
