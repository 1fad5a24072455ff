"""What the service reads from MLflow: trial states (which runs are an experiment's: `service.experiment_runs`),
per-trial rows, the Table-1 report.

MLflow queries over a thousand runs take a noticeable fraction of a second, so results are cached per
experiment, keyed by the experiment's `updated_at` (which changes whenever its state or counts change);
a finished experiment's report is in addition stored in the state database by the route.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from embinit.errors import EmbinitError
from embinit.tracking import records
from embinit.tracking.mlflow_store import resolve_uri
from embinit.tracking.run_readers import trial_row
from service.experiment_runs import chosen_records, close_orphans, drawn_records, trial_counts
from service.specs import api_terms


# The layout of a stored report (`Experiment.report`): one stored by an older layout is built again.
# 2: rows compared with a baseline, the unconverged-training flag, completeness (issue 22).
# 4: diverged seeds qualify the verdict (`diverged`, `survivor_verdict`, `note`; CSV `baseline_diverged`,
#    `verdict_note`; LaTeX ‡), zero-variance intervals, counts at the chosen point with `running`
#    (+ `all_points`), code-version notes, the dev-selection label, decimals for two significant digits.
# 5: the LaTeX table of an experiment with planned trials that have no result says so (caption, comment).
# 6: rows carry `never_started` (the CSV's column): the planned trials of the row's init with no run.
# 7: comparisons carry their test's `p`, Holm's `p_holm` over the task's comparisons (`holm_m`) and
#    `holds_after_holm` (CSV columns too; markdown "p (Holm)", LaTeX arrows in parentheses).
# 8: rows are compared by the model size they trained at (`embinit.model_size`), not the planned config's.
# 9: rows count their finished seeds that logged no value of the metric (`no_value`, CSV too, with a note).
# 10: rows carry `one_epoch` (seeds trained for a single epoch), which no longer count as still improving.
# 11: translation rows carry `tables` (target and source init where the source table's differs; CSV
#     `source_init`, a markdown note, the LaTeX caption).
# 12: rows carry `eval_split_note` (CSV too, with a note): a language model's `val/*` measured on another split
#     (`extras: {eval_split: test}`: val/* is the test split, and there is no separate test split).
# 13: a row without a comparison says why in `no_baseline` also where the baseline's row has no finished seed
#     (never started, all diverged) or the baseline has no row for its task or axes (the markdown's "Rows
#     without a comparison"); the CSV's `verdict_note` says it (`not compared with Xavier: ...`) and carries
#     the budget that qualifies a verdict ("at this budget: still improving"); numbers from 1e6 on print with
#     3 significant digits and an exponent (`1.76e+39`).
# 14: LaTeX: a cell whose every seed diverged is `--$^\ddagger$`, counted in the caption's ‡ sentence
#     (it was `--`, "no finished seed", the mark of a row never started).
REPORT_VERSION = 14


def absolute_sqlite_uri(url: str) -> str:
    """`sqlite:///rel.db` -> `sqlite:////abs/rel.db`, so every process means the same file."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////") and ":memory:" not in url:
        return "sqlite:///" + str(Path(url[len("sqlite:///"):]).resolve())
    return url


# Trial states whose run keeps why it stopped (`embinit.error`): failed, cancelled, interrupted (by Ctrl-C, or
# its driver was lost).
STOPPED = ("failed", "cancelled", "interrupted")


# A running experiment's trial table and report are built again when its state changes, but not sooner
# than this many times their last build's duration after it: at 10,000 trials a build takes about a
# second, and rebuilding on every 2-second refresh took the CPU the trials run on (docs/benchmarks.md).
LIVE_COST_FACTOR = 4.0


class ResultStore:
    """Reads one MLflow tracking store for the API, with a small cache."""

    def __init__(self, tracking_uri: str, cache_size: int = 64, live_cost_factor: float = LIVE_COST_FACTOR,
                 read_uri: str | None = None, write_direct: bool = False):
        self.tracking_uri = resolve_uri(tracking_uri)
        # The database behind a tracking server, read directly (settings.tracking_read_uri)
        self.read_uri = resolve_uri(read_uri) if read_uri else None
        if write_direct and self.read_uri is None:
            raise EmbinitError("EMBINIT_TRACKING_WRITE_DIRECT needs EMBINIT_TRACKING_READ_URI: the database "
                               "behind the tracking server, which the trials are to write to directly")
        # the trials write their runs there too (settings.tracking_write_direct), artifacts via the server
        self.trial_store_uri = self.read_uri if write_direct else None
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._size = cache_size
        self._lock = threading.Lock()
        self._building: dict[tuple, threading.Lock] = {}
        self.live_cost_factor = live_cost_factor
        # (kind, ..., exp id) -> value, built at, took: the last build of a running experiment, in build order;
        # dropped when the experiment is read finished, and at most `cache_size` of them
        self._live: dict[tuple, tuple[Any, float, float]] = {}

    def _current(self, kind: tuple, exp, build: Callable[[], Any]) -> Any:
        """`build()` for `exp` as it is now (cached by its `updated_at`); for a running experiment, the
        last build is served instead while it is younger than `live_cost_factor` x its build time."""
        from service.db import TERMINAL

        key = (*kind, exp.id, exp.updated_at)
        if exp.status in TERMINAL:  # its state is final: the cache by `updated_at` is all it needs
            with self._lock:  # every live build of it goes (a report per baseline read while it ran)
                for old in [k for k in self._live if k[-1] == exp.id]:
                    del self._live[old]
            value = self._cached(key, build)
        else:
            with self._lock:
                last = self._live.get(key[:-1])
            if last is not None and time.monotonic() - last[1] < self.live_cost_factor * last[2]:
                return last[0]

            def timed() -> Any:
                start = time.monotonic()
                built = build()
                with self._lock:
                    self._live.pop(key[:-1], None)
                    self._live[key[:-1]] = (built, time.monotonic(), time.monotonic() - start)
                    while len(self._live) > self._size:  # experiments that ended unread since: oldest first
                        del self._live[next(iter(self._live))]
                return built
            value = self._cached(key, timed)
        with self._lock:  # one state per experiment is kept: 10,000 trials' rows are ~20 MB a state
            for old in [k for k in self._cache if k[:-1] == key[:-1] and k != key]:
                del self._cache[old]
        return value

    def _records(self, exp) -> dict[str, records.TrialRecord]:
        """The record that stands for each trial key of the experiment's MLflow experiment: read once
        per state and shared by its trial table and its report, a failed trial's error in the API's terms."""
        def read() -> dict[str, records.TrialRecord]:
            chosen = chosen_records(self._reads(exp), exp.mlflow_experiment)
            return {key: replace(rec, error=api_terms(rec.error)) for key, rec in chosen.items()}
        return self._current(("records",), exp, read)

    def _reads(self, exp) -> str:
        """Where to read the experiment's runs: the database behind this API's tracking server when one is
        set (the same runs, the same experiment ids), else its tracking URI."""
        if self.read_uri and resolve_uri(exp.tracking_uri) == self.tracking_uri:
            return self.read_uri
        return exp.tracking_uri

    def _cached(self, key: tuple, build: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            building = self._building.setdefault(key, threading.Lock())
        with building:  # concurrent readers of a cold entry build it once; the others wait for it
            with self._lock:
                if key in self._cache:
                    return self._cache[key]
            try:
                value = build()
            finally:  # a build that raised (e.g. an unknown baseline) leaves no lock behind
                with self._lock:
                    self._building.pop(key, None)
            with self._lock:
                self._cache[key] = value
                while len(self._cache) > self._size:
                    self._cache.popitem(last=False)
        return value

    def prepare(self) -> str:
        """Create or upgrade the MLflow store, once, before the API accepts work (embinit.tracking.prepare).
        Behind a tracking server (which creates and migrates its store) the database read directly gets
        the trial-key index, when the server has made its tables."""
        from embinit.tracking.prepare import index_trial_keys, prepare_store

        done = prepare_store(self.tracking_uri)
        if self.read_uri and done == "external":
            done += ", trial keys indexed" if index_trial_keys(self.read_uri) else ", trial keys not indexed"
        return done

    def counts(self, exp) -> dict[str, int]:
        """The experiment's trials by state (`experiment_runs.trial_counts`), read where `_reads` says."""
        return trial_counts(exp, self._reads(exp))

    def close_orphans(self, exp, reason: str, status: str = "FAILED", tag: str | None = None) -> int:
        """`experiment_runs.close_orphans`: what the experiment's gone driver left RUNNING is closed."""
        return close_orphans(exp, reason, status, tag)

    def has_experiment(self, name: str) -> bool:
        """Whether the MLflow store has an experiment of this name."""
        from embinit.tracking.mlflow_store import experiment_id

        return experiment_id(name, self.read_uri or self.tracking_uri) is not None

    def experiment_id(self, exp) -> str | None:
        from embinit.tracking.mlflow_store import experiment_id

        return experiment_id(exp.mlflow_experiment, self._reads(exp))

    def trials(self, exp) -> list[dict[str, Any]]:
        return self._current(("trials",), exp, lambda: self._trials(exp))

    def _trials(self, exp) -> list[dict[str, Any]]:
        from embinit.spec import drawn_in
        from service.state import unrun_trial

        chosen = self._records(exp)
        if drawn_in(exp.spec):  # an Optuna search draws its configs, so its trials' keys, at run time
            runs = {rec.key: trial_row(rec) for rec in drawn_records(exp, chosen.values(), self._reads(exp))}
            keys = self._drawn_keys(exp, runs)
        else:
            runs = {key: trial_row(rec) for key, rec in chosen.items()}
            keys = exp.trial_keys
        planned = {}
        if not all(k in runs for k in keys):
            try:
                planned = self._planned(exp)
            except Exception:  # a spec stored by an older version: show keys without configs
                planned = {}
        # a trial with no run: still to start, or, once a cancel or a failure ended the experiment, never
        # started (what the experiment's counts call `cancelled` or `failed`, `state.settle_counts`)
        unrun, why = unrun_trial(exp.status)
        out = []
        for key in keys:
            run = runs.get(key)
            plan = planned.get(key, {})
            config = run["config"] if run else plan.get("config", {})
            out.append({"key": key, "status": run["status"] if run else unrun,
                        "label": run["label"] if run else plan.get("label"),
                        "seed": config.get("seed"), "config": config,
                        # the grid point of the run, else of the plan (an Optuna point: once drawn, by its run)
                        "axes": run["axes"] if run else plan.get("axes") or {},
                        "point": run["point"] if run else plan.get("point") or {},
                        "metric": run["metric"] if run else None, "best_metric": run["value"] if run else None,
                        "run_id": run["run_id"] if run else None, "run_name": run["run_name"] if run else None,
                        "error": (run["error"] if run["status"] in STOPPED else None) if run else why})
        return out

    def _drawn_keys(self, exp, runs: dict[str, dict[str, Any]]) -> list[str]:
        """An Optuna search's trial keys: `exp.trial_keys` are its planned points x seeds, which no run has;
        its trials are the runs its spec's sweeps trained (`runs`), in plan order, then the plan's key of
        each point and seed that has no run yet (its draws are still to come)."""
        try:
            planned = self._planned(exp)
        except Exception:  # a spec stored by an older version: its runs alone
            return sorted(runs)
        order: dict[tuple, int] = {}
        for key in exp.trial_keys:
            if key in planned:
                order.setdefault(_point(planned[key], planned[key]["seed"]), len(order))
        slot = {key: order.get(_point(run, run["config"].get("seed")), len(order)) for key, run in runs.items()}
        waiting = [key for key in exp.trial_keys
                   if key in planned and order[_point(planned[key], planned[key]["seed"])] not in slot.values()]
        return sorted(runs, key=lambda key: (slot[key], key)) + waiting

    def _planned(self, exp) -> dict[str, dict[str, Any]]:
        from embinit.spec import load_spec

        return self._cached(("plan", exp.id), lambda: {
            p.key: {"config": p.config, "label": p.label, "task": p.task, "axes": p.axes, "point": p.point,
                    "seed": p.seed}
            for p in load_spec(exp.spec).plan()})

    def report(self, exp, baseline: str | None = None) -> dict[str, str]:
        """The report in its four formats (`REPORT_VERSION` says which layout), each init compared with
        `baseline` (default Xavier; an init the experiment lacks: EmbinitError, a 422)."""
        return self._current(("report", baseline), exp, lambda: self._report(exp, baseline))

    def _report(self, exp, baseline: str | None) -> dict[str, str]:
        from embinit.report.completeness import completeness
        from embinit.report.table import Report, build_report
        from embinit.report.baseline import check_baseline
        from embinit.spec import drawn_in

        name = exp.mlflow_experiment
        # Only this spec's trials (an MLflow experiment may hold other specs' runs under the same name);
        # an Optuna search draws its trials at run time, so there its trials are those whose run (the one
        # that stands for the key) one of its spec's sweeps trained (`embinit.sweep_run`).
        optuna = drawn_in(exp.spec)
        planned = None if optuna else self._plan_rows(exp)
        if self.experiment_id(exp) is None:  # nothing has run yet: an empty table, every trial unfinished
            if baseline is not None and planned:  # the planned inits are the ones a baseline may name
                check_baseline(baseline, {p["label"] for p in planned})
            report = Report(name, [], tracking_uri=exp.tracking_uri, completeness=completeness(planned, {}),
                            **({"baseline": baseline} if baseline else {}))
        else:
            chosen = self._records(exp)
            if optuna:
                keys = {rec.key for rec in drawn_records(exp, chosen.values(), self._reads(exp))}
            else:
                keys = set(exp.trial_keys)
            report = build_report(name, exp.tracking_uri, keys=keys, baseline=baseline, planned=planned,
                                  chosen=chosen)
        return {"json": report.to_json(), "markdown": report.to_markdown(), "csv": report.to_csv(),
                "latex": report.to_latex(), "version": REPORT_VERSION}

    def _plan_rows(self, exp) -> list[dict[str, Any]] | None:
        try:
            plan = self._planned(exp)
        except Exception:  # a spec stored by an older version: no plan to compare with
            return None
        return [{"key": k, **plan[k]} for k in exp.trial_keys if k in plan]


def _point(row: dict[str, Any], seed: Any) -> tuple:
    """A planned trial's or a run's place in the plan: task, init label and seed."""
    return row.get("task"), row.get("label"), seed
