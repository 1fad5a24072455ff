"""The report's Figure 1 (mean validation curves per init, one PNG per task and axes setting) and the
order and names its rows and lines share with the tables."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from embinit.config import within
from embinit.task_registry import curve_metric, loss_metric
from embinit.tracking.run_names import short, value_text
from embinit.tracking.run_readers import metric_histories


def setting_text(setting: str) -> str:
    """The settings a row differs in (JSON), ` {name=value}` each, values as run names write them."""
    return "".join(f" {{{k}={short(value_text(v))}}}" for k, v in json.loads(setting).items())


def label_order(label: str) -> tuple:
    """Xavier first, then the pretrained init, its _Xavier, _Shuffled and Xavier_ variants."""
    order = 0 if label == "Xavier" else 4 if label.startswith("Xavier_") else 3 if label.endswith(
        "_Shuffled") else 2 if label.endswith("_Xavier") else 1
    return (order, label)


def _histories(uri: str | None, run_ids: list[str], metric: str) -> list[dict[int, float]]:
    """Per run, its metric per epoch (`run_readers.metric_histories`: one value per step, all runs in a
    few queries on a SQL store: 10,000 runs were 20,000 MLflow calls, ~100 s)."""
    got = metric_histories(uri, run_ids, metric)
    return [got[run_id].by_step for run_id in run_ids]


def _joined(figures: dict[tuple, list]) -> dict[tuple, list]:
    """The figures with the lines of an init planned without an axis (`planning.moot_axes`: Xavier under an
    `oov` axis) drawn in each figure of that axis's values, beside the inits it is compared with, and no
    figure of their own where such figures exist."""
    axes = {key: json.loads(key[1]) for key in figures}
    out: dict[tuple, list] = {}
    for key, lines in figures.items():
        wider = [k for k in figures if k[0] == key[0] and k != key and within(axes[key], axes[k])]
        if not wider:
            out[key] = lines + [line for k in figures if k[0] == key[0] and k != key
                                and within(axes[k], axes[key]) for line in figures[k]]
    return out


def mean_curves(report: Any, out_dir: Path) -> list[Path]:
    """Figure 1 per task (and axes setting): the validation metric beside the validation loss (of the split
    the task selects on, `task_registry.loss_metric`), per init
    the mean over seeds with the seeds' band (embinit.plots.figure1)."""
    from embinit.plots import figure1  # matplotlib only where a figure is drawn
    out_dir.mkdir(parents=True, exist_ok=True)
    figures: dict[tuple, list] = defaultdict(list)
    order: dict[str, tuple] = {}
    points = {(r["task"], r["init"], json.dumps(r["axes"], sort_keys=True),
               json.dumps(r["setting"], sort_keys=True, default=str)): r["point"] for r in report.rows}
    for (task, label, axes, setting), run_ids in report.run_ids.items():
        # the search point the line's seeds ran at, as the table's row names it: each init's best may differ
        point = "".join(f" [{k}={value_text(v)}]" for k, v in (points.get((task, label, axes, setting)) or {}).items())
        figures[(task, axes)].append((label + point + setting_text(setting), run_ids))
        order[label + point + setting_text(setting)] = label_order(label)   # GloVe_Xavier [lr=...] by its label
    figures = _joined(figures)
    paths = []
    for (task, axes), lines in sorted(figures.items()):
        lines = sorted(lines, key=lambda x: (order[x[0]], x[0]))
        metrics = list(dict.fromkeys([curve_metric(task), loss_metric(task)]))   # the metric, then its loss
        panels = [(m, {label: _histories(report.tracking_uri, run_ids, m) for label, run_ids in lines})
                  for m in metrics]
        # a panel no run logged (val/bleu of trials that computed no validation BLEU) would be drawn empty
        panels = [(m, by_label) for m, by_label in panels if any(h for hs in by_label.values() for h in hs)]
        if not panels:
            continue  # nothing finished yet (e.g. a cancelled sweep)
        # the axes as the table's rows write them (`pos_encoding=False lr=5`), not as JSON
        suffix = "".join(f" {k}={value_text(v)}" for k, v in json.loads(axes).items())
        name = f"{task}{'' if axes == '{}' else '-' + re.sub(r'[^A-Za-z0-9]+', '_', axes).strip('_')}.png"
        paths.append(figure1(panels, out_dir / name, f"{report.experiment}: {task}{suffix}"))
    return paths
