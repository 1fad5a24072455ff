"""Table 1 from MLflow alone: per task x init (x ablation axes), the reported metric's mean (σ) over
seeds, n, the mean best epoch and a 95% confidence interval (Student's t, clipped to the metric's range
from `config.metric_range`: `METRIC_RANGES` and the tasks' own ranges), with failed/diverged counts.

Each row is compared with the baseline init's row of the same task, axes and metric (Xavier unless
`baseline` names another; `embinit.report.baseline`): the difference with a 95% interval, paired on the
shared seeds, and a verdict. A row whose best epoch is the last epoch for most seeds is flagged: the model
was still improving when its budget ended. With the experiment's plan (`planned`, else the newest sweep's
spec in MLflow) the report says how many planned trials never finished and which inits have none
(`embinit.report.completeness`); a planned init without any run still gets its (empty) row.

Which trials make a row (one per configuration and seed, the best search point) and what each row
holds: `embinit.report.rows`.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embinit.report import completeness as coverage
from embinit.tracking import driver_liveness, mlflow_store, records, run_readers
from embinit.report import baseline as report_baseline, latex as report_latex
from embinit.comparison import t_quantile
from embinit.report.formatting import digits_by_metric, interval, number
from embinit.tracking.records import TrialRecord
from embinit.report.baseline import DEFAULT_BASELINE
from embinit.report.notes import (ci_clipped, clipped_notes, code_version_notes, compared_seed_notes,
                                  dev_selection_notes, eval_split_notes, no_value_notes, non_finite_notes,
                                  other_point_notes, outside_plan_notes, row_name, source_table_notes, stale_notes,
                                  unconverged_notes)
from embinit.report.plots import label_order, mean_curves
from embinit.report.rows import group, group_rows, summarize

__all__ = ["DEFAULT_BASELINE", "Report", "build_report", "mean_curves", "summarize", "t_quantile"]


@dataclass
class Report:
    experiment: str
    rows: list[dict[str, Any]]
    failed: list[dict[str, Any]] = field(default_factory=list)
    run_ids: dict[tuple, list[str]] = field(default_factory=dict)  # (task, label, axes, setting) -> runs
    tracking_uri: str | None = None
    baseline: str = DEFAULT_BASELINE
    completeness: dict[str, Any] | None = None   # embinit.report.completeness; None without a plan
    stale: list[dict[str, Any]] = field(default_factory=list)   # driver_liveness.stale_trials: not training

    def to_json(self) -> str:
        return json.dumps({"experiment": self.experiment, "baseline": self.baseline, "rows": self.rows,
                           "failed": self.failed, "completeness": self.completeness, "stale": self.stale},
                          indent=1)

    def to_csv(self) -> str:
        """One line per row. The counts `diverged`, `failed`, `running` are the row's trials at its search
        point (`*_all_points`: at every point); `never_started` is how many planned trials of the row's
        task, init and axes (every point) have no run at all, the "never started" of `completeness` (empty
        without a plan; rows that split one init by setting each carry its count). The 95% interval is
        `ci_low`, `ci_high`, clipped to the metric's range like the mean; `ci_clipped` says the t interval
        reached past the range (the markdown's "cut at the metric's range" note), and
        `ci95_half_width_unclipped` is its half-width t·s/√n before the clipping, so mean ± it can leave
        the range (JSON keeps it as `ci95`)."""
        buf = io.StringIO()
        cols = ["task", "init", "axes", "setting", "point", "metric", "split", "mean", "std", "n", "ci_low", "ci_high",
                "ci_clipped", "ci95_half_width_unclipped", "best_epoch", "best_at_last_epoch", "one_epoch", "diverged",
                "non_finite", "no_value",
                "failed", "running", "never_started", "failure_reasons", "failed_all_points", "diverged_all_points",
                "running_all_points", "code_versions", "source_init", "eval_split_note", *report_baseline.CSV_COLUMNS]
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in self.rows:
            w.writerow({**r, "axes": json.dumps(r["axes"]) if r["axes"] else "",
                        "setting": json.dumps(r["setting"]) if r["setting"] else "",
                        "point": json.dumps(r["point"]) if r["point"] else "",
                        "code_versions": json.dumps(r.get("code_versions") or {}),
                        "source_init": (r.get("tables") or {}).get("source", ""),
                        "ci95_half_width_unclipped": r.get("ci95"), "ci_clipped": ci_clipped(r),
                        "failure_reasons": "; ".join(f"{k} (x{v})" for k, v in r["failure_reasons"].items()),
                        **{f"{k}_all_points": v for k, v in (r.get("all_points") or {}).items()},
                        **report_baseline.csv_columns(r, self.baseline)})
        return buf.getvalue()

    def to_markdown(self) -> str:
        head = "| task | init | metric | mean (σ) | n | best epoch | 95% CI | diverged | failed | running |"
        lines = [f"### {self.experiment}", "", head, "|---" * 10 + "|"]
        digits = digits_by_metric(self.rows)
        for r in self.rows:
            last = " (last)" if r.get("still_improving") else " (of 1)" if r.get("one_epoch") == r["n"] > 0 else ""
            d = digits[r["task"], r["metric"]]
            lines.append(f"| {r['task']} | {row_name(r)} | {r['metric']} | {_fmt(r['mean'], d)} "
                         f"({_fmt(r['std'], d)}) | {r['n']} | {_fmt(r['best_epoch'], 1)}{last} | {_ci(r, d)} | "
                         f"{r['diverged']} | {r['failed']} | {r['running']} |")
        lines += coverage.markdown(self.completeness) + stale_notes(self.stale)
        lines += unconverged_notes(self.rows) + clipped_notes(self.rows, digits)
        lines += non_finite_notes(self.rows) + no_value_notes(self.rows) + eval_split_notes(self.rows)
        lines += other_point_notes(self.rows) + compared_seed_notes(self.rows) + outside_plan_notes(self.rows)
        lines += code_version_notes(self.rows) + dev_selection_notes(self.rows) + source_table_notes(self.rows)
        lines += report_baseline.markdown(self.rows, self.baseline, row_name)
        lines += self._split_notes()
        if self.failed:
            lines += ["", f"Failed trials: {len(self.failed)}"]
            for reason, n in Counter(f["reason"] for f in self.failed).most_common():
                lines.append(f"- {n} x {reason}")
        return "\n".join(lines) + "\n"

    def to_latex(self) -> str:
        """Table 1 for a paper: inits x (task, metric), mean (σ), marks vs the baseline (embinit.report.latex)."""
        return report_latex.to_latex(self.experiment, self.rows, self.baseline,
                                     incomplete=coverage.sentence(self.completeness))

    def _split_notes(self) -> list[str]:
        """One line per init label whose trials ran with several settings (shown as separate rows)."""
        split: dict[tuple, set[str]] = defaultdict(set)
        for r in self.rows:
            if r["setting"]:
                split[(r["task"], r["init"])].add(json.dumps(r["setting"], sort_keys=True))
        notes = []
        for (task, init), settings in split.items():
            fields = sorted({k for s in settings for k in json.loads(s)})
            notes.append(f"- {task} {init}: {len(settings)} configurations that differ in "
                         f"{', '.join(fields)}; one row each, not pooled")
        return ["", "Init labels covering several configurations:", *notes] if notes else []

    def plot(self, out_dir: str | Path) -> list[Path]:
        """Figure-1-style mean validation curves per init, one PNG per task (and axes setting)."""
        return mean_curves(self, Path(out_dir))


_fmt, _ci = number, interval


def build_report(experiment_name: str, tracking_uri: str | None = None, keys: set[str] | None = None,
                 baseline: str | None = None, planned: list[dict[str, Any]] | None = None,
                 chosen: dict[str, TrialRecord] | None = None) -> Report:
    """Aggregate the experiment's trial runs (only `keys` when given) into Table 1 rows, each compared
    with `baseline` (default Xavier; a label the experiment lacks is an error when named). `planned`
    (`completeness.planned_trials`): the sweep's plan; None reads the newest sweep's from MLflow.
    `chosen`: the experiment's records as `records.by_key` chose them, when the caller has read them."""
    if chosen is None:
        exp_id, trials = _records(experiment_name, tracking_uri, keys)
    else:
        exp_id = None
        trials = {k: r for k, r in chosen.items() if keys is None or k in keys}
    if planned is None and keys is None:
        exp_id = exp_id or mlflow_store.experiment_id(experiment_name, tracking_uri)
        planned = coverage.planned_in_mlflow(exp_id, tracking_uri) if exp_id is not None else None
    groups = group(list(trials.values()))
    for task, label, axes in coverage.empty_groups(planned, {g[:3] for g in groups}, trials):
        groups[(task, label, axes, "{}")] = []   # a planned init none of whose trials has a run
    configs = coverage.planned_configs(planned)   # what an empty group's row says of its tables
    rows, failed, run_ids = [], [], {}
    for gkey in sorted(groups, key=lambda g: (g[0], label_order(g[1]), g[2], g[3])):
        failed += group_rows(gkey, groups[gkey], rows, run_ids, configs.get(gkey[:3]))
    missing = coverage.never_started(planned, trials)
    for r in rows:   # the planned trials of the row's task, init and axes with no run (None: no plan)
        r["never_started"] = None if missing is None else missing.get(
            (r["task"], r["init"], json.dumps(r["axes"], sort_keys=True)), 0)
        r["planned_points"] = coverage.points_outside(planned, r["task"], r["init"], r["axes"], r["point"])
    if baseline is not None:
        report_baseline.check_baseline(baseline, {r["init"] for r in rows})
    report_baseline.compare_rows(rows, baseline or DEFAULT_BASELINE)
    stale = []
    if any(t.status == "running" for t in trials.values()) and (exp_id or tracking_uri):   # still training?
        exp_id = exp_id or mlflow_store.experiment_id(experiment_name, tracking_uri)
        stale = driver_liveness.stale_trials(exp_id, tracking_uri, list(trials.values())) if exp_id else []
    return Report(experiment_name, rows, failed, run_ids, tracking_uri, baseline or DEFAULT_BASELINE,
                  coverage.completeness(planned, trials), stale)


def _records(experiment: str, uri: str | None, keys: set[str] | None) -> tuple[str, dict[str, TrialRecord]]:
    exp_id = mlflow_store.experiment_id(experiment, uri)
    if exp_id is None:
        raise mlflow_store.no_experiment(experiment, uri)
    return exp_id, records.by_key(run_readers.trial_records(exp_id, uri), keys)

