"""The report's row names and the notes under its table: rows still improving at their last epoch, rows
whose interval is cut at the metric's range, rows some of whose finished seeds logged a non-finite value
or none (left out of their numbers), rows whose `val/*` is another split (a language model's test split),
trials at the search points a row does not report, search points compared on the seeds they share, rows
reported at a point the newest spec does not search, rows pooling seeds of several code versions, numbers
selected on the dev set they are reported on, translation rows whose source table has another init than
the target table the label names, trials MLflow says are running whose sweep is gone."""

from __future__ import annotations

import json
from typing import Any

from embinit.report.formatting import number
from embinit.report.plots import setting_text
from embinit.tracking.run_names import value_text


def row_name(r: dict[str, Any], point: bool = True) -> str:
    """The init with its axes, search point (unless `point` is False) and differing settings, as the
    markdown tables show it; values as run names write them (`run_names.value_text`)."""
    init = r["init"] + "".join(f" {k}={value_text(v)}" for k, v in r["axes"].items())
    init += "".join(f" [{k}={value_text(v)}]" for k, v in r["point"].items()) if point else ""
    return init + setting_text(json.dumps(r["setting"]))


def unconverged_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row whose best epoch is the last epoch for most of its seeds."""
    notes = [f"- {r['task']} {row_name(r)} ({r['metric']}): best epoch = last epoch for "
             f"{r['best_at_last_epoch']} of {r['n']} seeds" for r in rows if r.get("still_improving")]
    lines = ["", "Still improving when training stopped (best epoch = last epoch for most seeds): these rows "
             "compare training budgets, not converged models; more epochs may change the ranking.",
             *notes] if notes else []
    return lines + one_epoch_notes(rows)


def one_epoch_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row some of whose seeds trained for a single epoch: their best epoch is the last by
    construction, so nothing says whether they were still improving."""
    notes = [f"- {r['task']} {row_name(r)} ({r['metric']}): {r['one_epoch']} of {r['n']} seeds"
             for r in rows if r.get("one_epoch")]
    return ["", "Trained for one epoch (the best epoch is the only one; nothing shows whether they were "
            "still improving): these rows compare one epoch of training, not converged models.",
            *notes] if notes else []


def ci_clipped(r: dict[str, Any]) -> bool | None:
    """Whether the row's t interval, mean ± ci95, reaches past its metric's range, so that [ci_low,
    ci_high] is cut at the range's edge (None without an interval)."""
    if r.get("ci95") is None or r.get("ci_low") is None or r.get("ci_high") is None:
        return None
    low, high, tol = r["mean"] - r["ci95"], r["mean"] + r["ci95"], 1e-9 * max(1.0, abs(r["mean"]))
    return low < r["ci_low"] - tol or high > r["ci_high"] + tol


def clipped_notes(rows: list[dict[str, Any]], digits: dict[tuple[str, str], int]) -> list[str]:
    """One line per row whose t interval reaches past its metric's range (a BLEU of 2.1 ± 4.1 over two
    seeds): the table shows it cut at the range's edge, narrower on that side than the t interval, which
    the line gives (`digits`: `formatting.digits_by_metric`)."""
    notes = []
    for r in rows:
        if ci_clipped(r):
            low, high, d = r["mean"] - r["ci95"], r["mean"] + r["ci95"], digits[r["task"], r["metric"]]
            notes.append(f"- {r['task']} {row_name(r)} ({r['metric']}): t interval [{number(low, d)}, "
                         f"{number(high, d)}], shown as [{number(r['ci_low'], d)}, {number(r['ci_high'], d)}]")
    return ["", "95% intervals cut at the metric's range (the t interval reaches past it; more seeds narrow it):",
            *notes] if notes else []


def non_finite_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row with finished seeds whose metric is NaN or infinite (a test perplexity that
    overflowed): they are not in its n, mean or comparison."""
    notes = [f"- {r['task']} {row_name(r)} ({r['metric']}): {r['non_finite']} finished seed(s) logged a "
             "non-finite value" for r in rows if r.get("non_finite")]
    return ["", "Left out of n, the mean and the comparison (a non-finite value):", *notes] if notes else []


def no_value_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row with finished seeds that logged no value of its metric (a task without the split it
    is measured on; no finite validation value at any epoch, so no best epoch and no test metrics): they
    are not in its n, mean or comparison."""
    notes = [f"- {r['task']} {row_name(r)} ({r['metric']}): {r['no_value']} finished seed(s) logged no value of it"
             + (f": {r['eval_split_note']}" if r.get("eval_split_note") else "") for r in rows if r.get("no_value")]
    return ["", "Left out of n, the mean and the comparison (finished without a value: no split the metric is "
            "measured on, or no finite validation value at any epoch, so no best epoch):", *notes] if notes else []


def eval_split_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row (not per metric) whose `val/*` metrics were measured on another split than the
    task's validation split (a language model's `extras: {eval_split: test}`, `tasks.raw.eval_split_note`):
    its `best/val/*` and `selected/val/*` are that split's numbers, selected on it, and it may have no `test/*`."""
    notes = {f"- {r['task']} {row_name(r)}: {r['eval_split_note']}": None for r in rows if r.get("eval_split_note")}
    return ["", "Validated on another split than the task's own (the metrics keep the name `val/*`; their "
            "epochs were selected on that split):", *notes] if notes else []


def other_point_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row (not per metric) whose search has trials at other points that failed, diverged
    or are still running: the table's counts are those of the point the row reports."""
    notes = {}
    for r in rows:
        here, every = {k: r.get(k) or 0 for k in ("failed", "diverged", "running")}, r.get("all_points") or {}
        other = {k: every.get(k, 0) - here[k] for k in here if every.get(k, 0) > here[k]}
        if other:
            at = ", ".join(f"{k}={value_text(v)}" for k, v in r["point"].items())
            notes[f"- {r['task']} {row_name(r, point=False)} (reported at {at}): "
                  + ", ".join(f"{v} {k}" for k, v in other.items())] = None
    return ["", "At the other search points (not in the table's counts, which are the reported point's):",
            *notes] if notes else []


def compared_seed_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row whose search points were compared on the seeds they share (`point_compared_on`:
    some point lacks seeds another has, failed, running or never run): the best point is the best mean
    on those, while the row's numbers are over every seed of the point it reports."""
    notes = {f"- {r['task']} {row_name(r)}: seeds {', '.join(map(str, r['point_compared_on']))}": None
             for r in rows if r.get("point_compared_on")}
    return ["", "Search points compared on the seeds every point finished (their seeds differ; the row's numbers "
            "are over all of its point's seeds):", *notes] if notes else []


def outside_plan_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row reported at a search point the newest sweep's spec does not search
    (`planned_points`: the ones it does): every point the experiment holds competes, so a point of an
    earlier, wider grid can win, while the sweep's own table chose among its spec's points."""
    notes = {f"- {r['task']} {row_name(r)}: the spec searches "
             + "; ".join(", ".join(f"{k}={value_text(v)}" for k, v in p.items()) for p in r["planned_points"]): None
             for r in rows if r.get("planned_points")}
    return ["", "Reported at a search point the newest sweep's spec does not search (the best point is chosen "
            "among every point the experiment's runs hold, the earlier sweeps' too):", *notes] if notes else []


def code_version_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row whose seeds ran under more than one code version (`config.CODE_VERSION`; a rerun
    after a bump trains new keys, and the row keeps the newest run of each seed, whatever its version)."""
    notes = [f"- {r['task']} {row_name(r)} ({r['metric']}): " + ", ".join(
        f"{n} seed(s) under version {v}" for v, n in r["code_versions"].items())
        for r in rows if len(r.get("code_versions") or {}) > 1]
    return ["", "Seeds from several code versions pooled in one row (rerun the others under one version to "
            "compare like with like):", *notes] if notes else []


DEV_SELECTED = "dev, selected on dev"


def selected_on_dev(metric: str) -> bool:
    """Whether a reported `metric` is a dev-set best (`best/val/...`: classification, as the paper reports
    it; GLUE's test labels are hidden): the best epoch, and with a search the best point, are chosen on
    the very numbers reported, so they lean optimistic (a winner's curse, larger with more seed noise)."""
    return metric.startswith("best/val/")


def source_table_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per translation row whose source (encoder) table has another init than the target
    (decoder) table its label names: a row's label means the same whether its trials ran or not, so a
    planned init none of whose trials started (a cancelled experiment's empty row) is named as its plan
    says (`rows.group_rows`' `planned_config`)."""
    tables = {(r["task"], row_name(r, point=False)): r["tables"] for r in rows if r.get("tables")}
    if not tables:
        return []
    return ["", "Source tables: these inits name the target (decoder) table; the source (encoder) table was "
            "initialized otherwise:",
            *(f"- {task} {name}: target `{t['target']}`, source `{t['source']}`" for (task, name), t in tables.items())]


def dev_selection_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line naming the metrics reported as the best on the dev set they were selected on."""
    metrics = sorted({r["metric"] for r in rows if selected_on_dev(r["metric"])})
    if not metrics:
        return []
    return ["", f"{', '.join(metrics)}: {DEV_SELECTED} (the best epoch, and with a search the best point, are "
            "chosen on the same dev set these numbers come from: optimistic, for every init alike)."]


def stale_notes(stale: list[dict[str, Any]]) -> list[str]:
    """One line per trial counted as running whose sweep is gone (embinit.tracking.driver_liveness.stale_trials):
    nothing trains it; running its spec again resumes it (and closes the dead sweep's runs)."""
    if not stale:
        return []
    notes = [f"- {t['label']} seed {t['seed']} (run {t['run_id']}): {t['why']}"
             + (f"; its checkpoint after epoch {t['resume_epoch']} is kept" if t["resume_epoch"] is not None else "")
             for t in stale]
    return ["", f"Not training although MLflow says RUNNING ({len(stale)} of the running trials; running the spec "
            "again resumes them and closes the dead sweep's runs):", *notes]
