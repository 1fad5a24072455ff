"""The reproduction's section on the KNN match similarity between seeds: a function of the runs read
(`ReproductionData`), from the `sim/knn_<metric>_mean` history the sweep's `analyses.similarity` logged."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

from embinit.config import metric_range
from embinit.report.table import summarize
from embinit.reproduction.compare import ci_text, fmt, mean_std
from embinit.reproduction.export import Section
from embinit.reproduction.inputs import ROLE_TEXT, ROLES, role_of
from embinit.reproduction.knn_settings import run_settings, settings_text
from embinit.tracking.run_readers import metric_history

if TYPE_CHECKING:
    from embinit.reproduction.data import ReproductionData


def similarity_section(rep: ReproductionData) -> Section:
    metric = f"sim/knn_{rep.inputs.similarity_metric}_mean"
    s = Section("KNN match similarity between seeds")
    s.lines += [f"`{metric}`: for every token, the {rep.inputs.similarity_metric} overlap of its K nearest "
                "neighbours in two seeds' tables, averaged over tokens; each non-reference seed against the "
                "reference seed of the same init, logged during training (step 0 = at init). K and the "
                "neighbour measure (inner product or cosine) are given per experiment, as the spec of the sweep "
                "that trained each run set them (`analyses.similarity`). Not reported in the paper.", ""]
    rows = []
    for g in rep.inputs.groups:
        # one run per seed, as Table 1 counts (a seed trained again under a new key is one pair, not two)
        trials = [t for role in ROLES for t in rep.main_trials(g, role)]
        have = [t for t in trials if metric in t.metrics]
        if not have:
            continue
        hist = {t.run_id: metric_history(rep.uri, t.run_id, metric).points for t in have}
        steps = sorted({st for h in hist.values() for st, _ in h})
        knn = settings_text(run_settings(have, rep.data[g.experiment][1], rep.uri).values())
        s.lines += [f"**{g.task}, {g.source}** (`{g.experiment}`; {knn})", "",
                    "| init | at init | end of training mean (σ) | n pairs | 95% CI |", "|---|---|---|---|---|"]
        curves = {}
        for role in ROLES:
            ts = [t for t in have if role_of(t.label, g.source) == role]
            if not ts:
                continue
            label = ROLE_TEXT[role].format(p=g.source)
            first = summarize([hist[t.run_id][0][1] for t in ts if hist[t.run_id]], metric_range(metric))
            last = summarize([hist[t.run_id][-1][1] for t in ts if hist[t.run_id]], metric_range(metric))
            # the values each summary is computed from, per seed (review M6, as ReproductionData.per_seed)
            first["per_seed"], last["per_seed"] = ({str(t.config.get("seed")): {"value": hist[t.run_id][i][1],
                                                                                 "run_id": t.run_id}
                                                    for t in ts if hist[t.run_id]} for i in (0, -1))
            s.lines.append(f"| {label} | {mean_std(first, 3)} | {mean_std(last, 3)} | {last['n']} | "
                           f"{ci_text(last, 3)} |")
            curves[label] = {st: statistics.fmean([v for t in ts for s2, v in hist[t.run_id] if s2 == st]
                                                  or [math.nan])
                             for st in steps}
            rows.append({"task": g.task, "init": label, "at_init": first, "end": last,
                         "curve": {str(k): v for k, v in curves[label].items()}})
        if curves and steps:
            show = steps if len(steps) <= 12 else steps[:: max(1, len(steps) // 10)] + [steps[-1]]
            show = sorted(set(show))
            s.lines += ["", "Over training (mean over pairs; columns: optimizer step):", "",
                        "| init | " + " | ".join(str(x) for x in show) + " |", "|---" * (len(show) + 1) + "|"]
            for label, c in curves.items():
                s.lines.append(f"| {label} | " + " | ".join(fmt(c.get(x), 3) for x in show) + " |")
        s.lines.append("")
    rep.exports["similarity"] = rows
    if not rows:
        s.lines.append(f"No trial logged `{metric}`.")
    return s
