"""Which trials make a report row and what the row says (`embinit.report.table` assembles the table).

Runs are grouped by everything but the seed: trials of one init label whose resolved configs differ in
anything else (e.g. the same spec run from the CLI and from the service with another pretrained path)
get one row each, marked with the fields that differ. Each trial key counts once, and so does each seed
of a configuration (the run `records.stand_ins` chooses for its (search point, seed) slot).

With a search, each (task, init, axes) group reports its best search point: the one whose seeds have
the best mean selection metric (the paper's MNLI grid search), with the point's values in the row. The
row's counts (`failed`, `diverged`, `running`, `non_finite`, `no_value`) are all of the trials at that point, the
trials its numbers stand for; `all_points` counts every point of the group.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections import Counter, defaultdict
from typing import Any

from embinit import task_defs
from embinit.tracking import records
from embinit.report import baseline as report_baseline
from embinit.comparison import no_spread, t_quantile
from embinit.config import TrialConfig, metric_range
from embinit.tracking.records import RESULT, TrialRecord
from embinit.report.notes import DEV_SELECTED, selected_on_dev
from embinit.tasks.raw import eval_split_note


def summarize(values: list[float], bounds: tuple[float, float] = (-math.inf, math.inf)) -> dict[str, Any]:
    """mean, sample σ, n, the 95% CI half-width and the interval [ci_low, ci_high], the mean and the
    interval clipped to `bounds` (the metric's range: a BLEU of 100.00000000000004 from float rounding
    reads 100), so ci_low <= mean <= ci_high; the CI entries are None where n < 2 and where the values
    are all equal (a zero-width interval from two equal seeds is no certainty: `comparison.no_spread`).
    Non-finite values (NaN, ±inf: a diverged seed's loss) are left out, as `comparison.paired` leaves them
    out of a comparison: n counts the finite values, the ones the numbers are computed from."""
    values = [v for v in values if math.isfinite(v)]
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "std": None, "ci95": None, "ci_low": None, "ci_high": None}
    mean = min(max(statistics.fmean(values), bounds[0]), bounds[1])
    std = statistics.stdev(values) if n > 1 else None
    ci = t_quantile(n - 1) * std / math.sqrt(n) if std is not None and not no_spread(values, values) else None
    low, high = (None, None) if ci is None else (max(bounds[0], mean - ci), min(bounds[1], mean + ci))
    return {"n": n, "mean": mean, "std": std, "ci95": ci, "ci_low": low, "ci_high": high}


# The report's rows are built from trial records (one per key, `records.by_key`).
_Trial = TrialRecord


def _resolved(t: _Trial) -> dict[str, Any]:
    """The trial's config with its task's defaults filled in (a copy). Resolving does not read the
    seed, so the seeds of one setting share one resolution."""
    return _resolved_config(t.config)


def _resolved_config(config: dict[str, Any]) -> dict[str, Any]:
    """`_resolved` of a config (a run's or a planned trial's)."""
    config = dict(config)
    has_seed, seed = "seed" in config, config.pop("seed", None)
    out = dict(_resolve(json.dumps(config, sort_keys=True, default=str)))
    return {**out, "seed": seed} if has_seed else out


@functools.lru_cache(maxsize=1024)
def _resolve(config_json: str) -> dict[str, Any]:
    """Resolving costs ~0.1 ms a config; a report asks once per trial and reported metric, and the
    service builds a running experiment's report again and again: each distinct setting once."""
    config = json.loads(config_json)
    try:
        return TrialConfig.from_dict(config).resolved().to_dict()
    except Exception:
        return config


def _setting(t: _Trial) -> dict[str, Any]:
    """Everything the trial computed with but its seed and search point: its resolved config without
    seed, data order seed (when it follows the seed), threads, device and the searched keys. `d_model`
    and `heads` are the ones it trained with where the run recorded them (`records.MODEL_SIZE_TAG`): a
    `d_model` left unset is the pretrained source's D for one init and the task's for Xavier."""
    cfg = {**_resolved(t), **t.model_size}
    if isinstance(cfg.get("task_def"), dict):   # a task defined in the spec: as keyed (its description is no setting)
        cfg["task_def"] = task_defs.canonical(cfg["task_def"])
    drop = {"seed", *TrialConfig.NOT_IN_KEY, *t.point}
    if cfg.get("data_seed") in (None, cfg.get("seed")):
        drop.add("data_seed")
    return {k: v for k, v in cfg.items() if k not in drop}


def _one_per_seed(trials: list[_Trial]) -> list[_Trial]:
    """One trial per (search point, seed), the one `records.stand_ins` chooses (a rerun under another key
    of the same configuration, e.g. after a code version bump, does not count twice)."""
    return list(records.stand_ins(trials, _seed_slot).values())


def _seed_slot(t: _Trial) -> tuple:
    """The report's slot of a trial: its search point and seed (a row counts each slot once)."""
    return json.dumps(t.point, sort_keys=True), t.config.get("seed")


def group(trials: list[_Trial]) -> dict[tuple, list[_Trial]]:
    """(task, label, axes json, differing settings json) -> its trials. The last part is {} unless
    the label's trials were run with several settings; then it holds the fields that tell them apart."""
    return {gkey: _one_per_seed(members) for gkey, members in by_setting(trials).items()}


def by_setting(trials: list[_Trial]) -> dict[tuple, list[_Trial]]:
    """`group`'s keys -> every trial of each, several runs of one seed included (`group` keeps one)."""
    by_label: dict[tuple, dict[str, list[_Trial]]] = defaultdict(lambda: defaultdict(list))
    for t in trials:
        setting = json.dumps(_setting(t), sort_keys=True, default=str)
        by_label[(t.task, t.label, json.dumps(t.axes, sort_keys=True))][setting].append(t)
    out: dict[tuple, list[_Trial]] = {}
    for gkey, settings in by_label.items():
        parsed = [json.loads(s) for s in settings]
        differ = sorted({k for p in parsed for k in p if any(q.get(k) != p.get(k) for q in parsed)})
        for text, members in settings.items():
            which = {k: json.loads(text).get(k) for k in differ}
            out[(*gkey, json.dumps(which, sort_keys=True, default=str))] = members
    return out


def _epoch_metric(metric: str) -> str:
    return f"{metric}_epoch" if metric.startswith("best/") else "best_epoch"


def best_point(trials: list[_Trial]) -> dict[str, Any]:
    """The search point a report row of `trials` (one init's, of one setting) stands for: `_best_point`
    of one trial per (point, seed), as the row counts them. The reproduction reads its rows' point by it."""
    return _best_point(_one_per_seed(trials))[0]


def _best_point(trials: list[_Trial]) -> tuple[dict[str, Any], list | None]:
    """The search point with the best mean selection metric, among the points that lost the fewest seeds
    (diverged, or no finite value), and the seeds it was compared on where they are not every point's own.

    The means are over the seeds every such point finished with a value, where there are some: a point
    whose other seeds failed, are still running or were never run competes on the seeds it shares, not
    with a mean of fewer seeds (the best of several noisy means favours the noisiest: a point on 1 seed
    won over one on 3 with a lower mean on the seed they shared). In a complete search every point has
    the same seeds, and this is each point's mean. Without a shared seed, each point's own mean."""
    points: dict[str, list[_Trial]] = defaultdict(list)
    for t in trials:
        points[json.dumps(t.point, sort_keys=True)].append(t)
    if len(points) == 1:
        return trials[0].point, None
    metric, mode = (trials[0].selection or ["val/loss", "min"])[:2]
    values = {p: _seed_values(ts, metric) for p, ts in points.items()}
    # a point that diverged on a seed loses to one that did not, however good its survivors (a learning
    # rate too high for 2 seeds of 3 does not win on the third)
    lost = {p: sum(t.status in RESULT for t in ts) - len(values[p]) for p, ts in points.items()}
    least = min(lost.values())
    contenders = [set(values[p]) for p in points if lost[p] == least and values[p]]
    shared = set.intersection(*contenders) if contenders else set()

    def score(p: str) -> tuple[int, float]:
        v = values[p]
        if not v:
            return lost[p], math.inf
        seeds = shared if shared and lost[p] == least else v.keys()
        return lost[p], statistics.fmean(v[s] for s in seeds) * (1 if mode == "min" else -1)
    subset = shared and any(set(v) != shared for p, v in values.items() if lost[p] == least and v)
    return json.loads(min(points, key=score)), sorted(shared, key=str) if subset else None


def _seed_values(trials: list[_Trial], metric: str) -> dict:
    """seed -> the finished trial's finite `best/<metric>` (the point's comparable seeds)."""
    vals = {t.config.get("seed"): t.metrics.get(f"best/{metric}") for t in trials if t.status == "finished"}
    return {s: v for s, v in vals.items() if v is not None and math.isfinite(v)}


def failure_reason(error: str | None) -> str:
    """A failed trial's reason as reports show it: its error's last line (a traceback's exception), cut
    to 200 characters with an ellipsis that says so (the whole error is the trial's `embinit.error`)."""
    lines = [ln.strip() for ln in (error or "unknown error").strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else "unknown error"
    return last if len(last) <= 200 else last[:199] + "…"


def source_table(cfg: dict[str, Any]) -> dict[str, str] | None:
    """{"target": init, "source": init} for a translation trial's resolved config whose source (encoder)
    table has another init than its target table, which its label names (`{tgt: glove, src: xavier}` is
    "GloVe"); else None."""
    source, target = cfg.get("src_init"), cfg.get("init")
    return {"target": target, "source": source} if source and source != target else None


def group_rows(gkey: tuple, members: list[_Trial], rows: list, run_ids: dict,
               planned_config: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Append the group's rows (one per reported metric) and its run ids; return its failed trials.
    `planned_config`: for a group without any run (a planned init none of whose trials started), a
    planned trial's config, which says its tables (`source_table`) as a run's would."""
    task, label, axes, setting = gkey
    point, compared_on = _best_point(members) if members else ({}, None)
    chosen = [t for t in members if t.point == point]
    run_ids[gkey] = [t.run_id for t in chosen if t.status in RESULT]
    bad = [t for t in members if t.status == "failed"]
    counts = {**_counts(chosen), "failure_reasons": dict(Counter(failure_reason(t.error) for t in chosen
                                                                 if t.status == "failed")),
              "all_points": _counts(members)}
    like = report_baseline.basis(_setting(members[0])) if members else None   # what a baseline must share
    cfg = _resolved(members[0]) if members else {}   # the group's setting: one trial's config says it
    # which tables its label names: a run's config, else (no run yet) the plan's
    tables = source_table(cfg if members or not planned_config else _resolved_config(planned_config))
    # which split val/* is, where not the task's own (one per group: extras are part of its setting)
    split_note = eval_split_note(cfg.get("extras")) if members else None
    entry = task_defs.entry_of(task, json.loads(setting).get("task_def"))
    for metric in entry.reported if entry is not None else []:
        finished = [t for t in chosen if t.status == "finished"]
        logged = [t for t in finished if metric in t.metrics]   # finished without it: no split, no best epoch
        ok = [t for t in logged if math.isfinite(t.metrics[metric])]   # a test/ppl of inf is no mean
        epochs = [t.metrics[_epoch_metric(metric)] for t in ok if _epoch_metric(metric) in t.metrics]
        at_last = sum(_best_at_last_epoch(t, metric) for t in ok)
        one_epoch = sum(_budget(t) == 1 for t in ok)
        rows.append({"task": task, "init": label, "axes": json.loads(axes), "setting": json.loads(setting),
                     "point": point, "metric": metric, "split": _split(metric),
                     **summarize([t.metrics[metric] for t in ok], metric_range(metric)),
                     "seeds": {str(t.config.get("seed")): t.metrics[metric] for t in ok},
                     "best_epoch": statistics.fmean(epochs) if epochs else None,
                     "best_at_last_epoch": at_last, "still_improving": bool(ok) and at_last > len(ok) / 2,
                     "one_epoch": one_epoch,
                     **counts, "non_finite": len(logged) - len(ok), "no_value": len(finished) - len(logged),
                     "code_versions": _versions(ok), "tables": tables, "eval_split_note": split_note,
                     "point_compared_on": compared_on,
                     "_basis": like})
    return [{"task": task, "init": label, "run_id": t.run_id, "reason": failure_reason(t.error)} for t in bad]


def _split(metric: str) -> str:
    """Which data a row's number comes from: `dev, selected on dev` for a dev-set best."""
    return DEV_SELECTED if selected_on_dev(metric) else metric.split("/")[-2] if "/" in metric else ""


def _versions(trials: list[_Trial]) -> dict[str, int]:
    """code version -> how many of `trials` ran under it (`unrecorded`: a run from before the tag)."""
    return dict(sorted(Counter(t.code_version or "unrecorded" for t in trials).items()))


def _counts(trials: list[_Trial]) -> dict[str, int]:
    """How many of `trials` diverged, failed and are still running."""
    return {k: sum(t.status == k for t in trials) for k in ("diverged", "failed", "running")}


def _budget(t: _Trial) -> int | float | None:
    """The trial's epoch budget, as resolved (None when not recorded as a number)."""
    last = _resolved(t).get("epochs")
    return last if isinstance(last, (int, float)) and not isinstance(last, bool) else None


def _best_at_last_epoch(t: _Trial, metric: str) -> bool:
    """Whether the trial's best epoch (for `metric`) is the last epoch of a budget of several: still
    improving. With a budget of one epoch the best is the last by construction, which shows nothing."""
    epoch, last = t.metrics.get(_epoch_metric(metric)), _budget(t)
    return epoch is not None and last is not None and last > 1 and epoch >= last
