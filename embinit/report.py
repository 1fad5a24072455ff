"""Table 1 from MLflow alone: per task x init (x ablation axes), the reported metric's mean (σ) over
seeds, n, the mean best epoch and a 95% confidence interval (Student's t, clipped to the metric's range
from `config.METRIC_RANGES`), with failed/diverged counts.

Runs are grouped by everything but the seed: trials of one init label whose resolved configs differ in
anything else (e.g. the same spec run from the CLI and from the service with another pretrained path)
get one row each, marked with the fields that differ, and the markdown says so. Each trial key counts
once, and so does each seed of a configuration (the newest run of its best status).

With a search, each (task, init, axes) group reports its best search point: the one whose seeds have
the best mean selection metric (the paper's MNLI grid search), with the point's values in the row.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embinit import records, tracking
from embinit.config import TASKS, TrialConfig, metric_range
from embinit.errors import EmbinitError
from embinit.formatting import interval, number
from embinit.records import TrialRecord


def t_quantile(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom."""
    from scipy.stats import t  # scipy comes with mlflow
    return float(t.ppf(0.975, df))


def summarize(values: list[float], bounds: tuple[float, float] = (-math.inf, math.inf)) -> dict[str, Any]:
    """mean, sample σ, n, the 95% CI half-width and the interval [ci_low, ci_high] clipped to `bounds`
    (the metric's range: a BLEU interval never leaves [0, 100]); the CI entries are None where n < 2."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "std": None, "ci95": None, "ci_low": None, "ci_high": None}
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if n > 1 else None
    ci = t_quantile(n - 1) * std / math.sqrt(n) if std is not None else None
    low, high = (None, None) if ci is None else (max(bounds[0], mean - ci), min(bounds[1], mean + ci))
    return {"n": n, "mean": mean, "std": std, "ci95": ci, "ci_low": low, "ci_high": high}


# The report's rows are built from trial records (one per key, `records.by_key`).
_Trial = TrialRecord


def _trials(experiment: str, uri: str | None, keys: set[str] | None) -> list[_Trial]:
    exp_id = tracking.experiment_id(experiment, uri)
    if exp_id is None:
        raise EmbinitError(f"no MLflow experiment {experiment!r} in {tracking.resolve_uri(uri)}")
    return list(records.by_key(tracking.trial_records(exp_id, uri), keys).values())


def _setting(t: _Trial) -> dict[str, Any]:
    """Everything the trial computed with but its seed and search point: its resolved config without
    seed, data order seed (when it follows the seed), threads, device and the searched keys."""
    try:
        cfg = TrialConfig.from_dict(t.config).resolved().to_dict()
    except Exception:
        cfg = dict(t.config)
    drop = {"seed", *TrialConfig.NOT_IN_KEY, *t.point}
    if cfg.get("data_seed") in (None, cfg.get("seed")):
        drop.add("data_seed")
    return {k: v for k, v in cfg.items() if k not in drop}


def _one_per_seed(trials: list[_Trial]) -> list[_Trial]:
    """One trial per (search point, seed): the newest of the best status (a rerun under another key of
    the same configuration, e.g. after a code version bump, does not count twice)."""
    best: dict[tuple, _Trial] = {}
    for t in sorted(trials, key=lambda t: t.start_ms):
        slot = (json.dumps(t.point, sort_keys=True), t.config.get("seed"))
        old = best.get(slot)
        if old is None or records.STATUS_RANK[t.status] >= records.STATUS_RANK[old.status]:
            best[slot] = t
    return list(best.values())


def _group(trials: list[_Trial]) -> dict[tuple, list[_Trial]]:
    """(task, label, axes json, differing settings json) -> its trials. The last part is {} unless
    the label's trials were run with several settings; then it holds the fields that tell them apart."""
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
            out[(*gkey, json.dumps(which, sort_keys=True, default=str))] = _one_per_seed(members)
    return out


def _epoch_metric(metric: str) -> str:
    return f"{metric}_epoch" if metric.startswith("best/") else "best_epoch"


def _best_point(trials: list[_Trial]) -> dict[str, Any]:
    """The search point with the best mean selection metric among its finished seeds."""
    points: dict[str, list[_Trial]] = defaultdict(list)
    for t in trials:
        points[json.dumps(t.point, sort_keys=True)].append(t)
    if len(points) == 1:
        return trials[0].point
    metric, mode = (trials[0].selection or ["val/loss", "min"])[:2]

    def score(ts: list[_Trial]) -> float:
        vals = [t.metrics.get(f"best/{metric}") for t in ts if t.status == "finished"]
        vals = [v for v in vals if v is not None and math.isfinite(v)]
        if not vals:
            return math.inf
        return statistics.fmean(vals) * (1 if mode == "min" else -1)
    return json.loads(min(points, key=lambda p: score(points[p])))


@dataclass
class Report:
    experiment: str
    rows: list[dict[str, Any]]
    failed: list[dict[str, Any]] = field(default_factory=list)
    run_ids: dict[tuple, list[str]] = field(default_factory=dict)  # (task, label, axes, setting) -> runs
    tracking_uri: str | None = None

    def to_json(self) -> str:
        return json.dumps({"experiment": self.experiment, "rows": self.rows, "failed": self.failed}, indent=1)

    def to_csv(self) -> str:
        buf = io.StringIO()
        cols = ["task", "init", "axes", "setting", "point", "metric", "mean", "std", "n", "ci95", "ci_low",
                "ci_high", "best_epoch", "diverged", "failed", "failure_reasons"]
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in self.rows:
            w.writerow({**r, "axes": json.dumps(r["axes"]) if r["axes"] else "",
                        "setting": json.dumps(r["setting"]) if r["setting"] else "",
                        "point": json.dumps(r["point"]) if r["point"] else "",
                        "failure_reasons": "; ".join(f"{k} (x{v})" for k, v in r["failure_reasons"].items())})
        return buf.getvalue()

    def to_markdown(self) -> str:
        head = "| task | init | metric | mean (σ) | n | best epoch | 95% CI | diverged | failed |"
        lines = [f"### {self.experiment}", "", head, "|---" * 9 + "|"]
        for r in self.rows:
            init = r["init"] + "".join(f" {k}={v}" for k, v in r["axes"].items())
            init += "".join(f" [{k}={v}]" for k, v in r["point"].items())
            init += _setting_text(json.dumps(r["setting"]))
            lines.append(f"| {r['task']} | {init} | {r['metric']} | {_fmt(r['mean'])} ({_fmt(r['std'])}) | "
                         f"{r['n']} | {_fmt(r['best_epoch'], 1)} | {_ci(r)} | {r['diverged']} | {r['failed']} |")
        lines += self._split_notes()
        if self.failed:
            lines += ["", f"Failed trials: {len(self.failed)}"]
            for reason, n in Counter(f["reason"] for f in self.failed).most_common():
                lines.append(f"- {n} x {reason}")
        return "\n".join(lines) + "\n"

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


def _setting_text(setting: str) -> str:
    return "".join(f" {{{k}={_short(v)}}}" for k, v in json.loads(setting).items())


def _short(value: Any, width: int = 40) -> str:
    text = str(value)
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _reason(error: str | None) -> str:
    lines = [ln.strip() for ln in (error or "unknown error").strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "unknown error")[:200]


def build_report(experiment_name: str, tracking_uri: str | None = None,
                 keys: set[str] | None = None) -> Report:
    """Aggregate the experiment's trial runs (only `keys` when given) into Table 1 rows."""
    groups = _group(_trials(experiment_name, tracking_uri, keys))
    rows, failed, run_ids = [], [], {}
    for gkey in sorted(groups, key=lambda g: (g[0], _label_order(g[1]), g[2], g[3])):
        task, label, axes, setting = gkey
        members = groups[gkey]
        point = _best_point(members)
        chosen = [t for t in members if t.point == point]
        run_ids[gkey] = [t.run_id for t in chosen if t.status in ("finished", "diverged")]
        bad = [t for t in members if t.status == "failed"]
        failed += [{"task": task, "init": label, "run_id": t.run_id, "reason": _reason(t.error)} for t in bad]
        for metric in tracking.reported_metrics(task) if task in TASKS else []:
            ok = [t for t in chosen if t.status == "finished" and metric in t.metrics]
            epochs = [t.metrics[_epoch_metric(metric)] for t in ok if _epoch_metric(metric) in t.metrics]
            rows.append({"task": task, "init": label, "axes": json.loads(axes), "setting": json.loads(setting),
                         "point": point, "metric": metric,
                         **summarize([t.metrics[metric] for t in ok], metric_range(metric)),
                         "best_epoch": statistics.fmean(epochs) if epochs else None,
                         "diverged": sum(t.status == "diverged" for t in chosen), "failed": len(bad),
                         "failure_reasons": dict(Counter(_reason(t.error) for t in bad)),
                         "running": sum(t.status == "running" for t in members)})
    return Report(experiment_name, rows, failed, run_ids, tracking_uri)


def _label_order(label: str) -> tuple:
    """Xavier first, then the pretrained init, its _Xavier, _Shuffled and Xavier_ variants."""
    order = 0 if label == "Xavier" else 4 if label.startswith("Xavier_") else 3 if label.endswith(
        "_Shuffled") else 2 if label.endswith("_Xavier") else 1
    return (order, label)


def curve_metric(task: str) -> str:
    """The validation curve Figure 1 shows: val BLEU for translation, else the task's val metric."""
    return f"val/{TASKS[task].metric}" if task in TASKS else "val/loss"


def _histories(client, run_ids: list[str], metric: str) -> list[dict[int, float]]:
    """Per run, its metric per epoch (the last value logged at each step: a resumed trial may have
    logged an epoch twice)."""
    out = []
    for run_id in run_ids:
        last: dict[int, float] = {}
        for m in sorted(client.get_metric_history(run_id, metric), key=lambda m: m.timestamp):
            last[m.step] = m.value
        out.append(last)
    return out


def mean_curves(report: Report, out_dir: Path) -> list[Path]:
    """Figure 1 per task (and axes setting): the validation metric beside the validation loss, per init
    the mean over seeds with the seeds' band (embinit.sweep.plots.figure1)."""
    from embinit.sweep.plots import figure1  # matplotlib only where a figure is drawn
    out_dir.mkdir(parents=True, exist_ok=True)
    client = tracking.client(report.tracking_uri)
    figures: dict[tuple, list] = defaultdict(list)
    for (task, label, axes, setting), run_ids in report.run_ids.items():
        figures[(task, axes)].append((label + _setting_text(setting), run_ids))
    paths = []
    for (task, axes), lines in sorted(figures.items()):
        lines = sorted(lines, key=lambda x: _label_order(x[0]))
        metrics = [curve_metric(task)] + (["val/loss"] if curve_metric(task) != "val/loss" else [])
        panels = [(m, {label: _histories(client, run_ids, m) for label, run_ids in lines}) for m in metrics]
        if not any(h for _, by_label in panels for hs in by_label.values() for h in hs):
            continue  # nothing finished yet (e.g. a cancelled sweep)
        suffix = "" if axes == "{}" else " " + axes
        name = f"{task}{'' if axes == '{}' else '-' + re.sub(r'[^A-Za-z0-9]+', '_', axes).strip('_')}.png"
        paths.append(figure1(panels, out_dir / name, f"{report.experiment}: {task}{suffix}"))
    return paths
