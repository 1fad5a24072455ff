"""The report's Figure 1 (mean validation curves per init, one PNG per task and axes setting) and the
order and names its rows and lines share with the tables."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from embinit import tracking
from embinit.config import TASKS


def setting_text(setting: str) -> str:
    return "".join(f" {{{k}={_short(v)}}}" for k, v in json.loads(setting).items())


def _short(value: Any, width: int = 40) -> str:
    text = str(value)
    return text if len(text) <= width else "…" + text[-(width - 1):]


def label_order(label: str) -> tuple:
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


def mean_curves(report: Any, out_dir: Path) -> list[Path]:
    """Figure 1 per task (and axes setting): the validation metric beside the validation loss, per init
    the mean over seeds with the seeds' band (embinit.plots.figure1)."""
    from embinit.plots import figure1  # matplotlib only where a figure is drawn
    out_dir.mkdir(parents=True, exist_ok=True)
    client = tracking.client(report.tracking_uri)
    figures: dict[tuple, list] = defaultdict(list)
    for (task, label, axes, setting), run_ids in report.run_ids.items():
        figures[(task, axes)].append((label + setting_text(setting), run_ids))
    paths = []
    for (task, axes), lines in sorted(figures.items()):
        lines = sorted(lines, key=lambda x: label_order(x[0]))
        metrics = [curve_metric(task)] + (["val/loss"] if curve_metric(task) != "val/loss" else [])
        panels = [(m, {label: _histories(client, run_ids, m) for label, run_ids in lines}) for m in metrics]
        if not any(h for _, by_label in panels for hs in by_label.values() for h in hs):
            continue  # nothing finished yet (e.g. a cancelled sweep)
        suffix = "" if axes == "{}" else " " + axes
        name = f"{task}{'' if axes == '{}' else '-' + re.sub(r'[^A-Za-z0-9]+', '_', axes).strip('_')}.png"
        paths.append(figure1(panels, out_dir / name, f"{report.experiment}: {task}{suffix}"))
    return paths
