"""The reproduction's section on the KNN match similarity between seeds: a function of the runs read
(`ReproductionData`), from the `sim/knn_<metric>_mean` history the sweep's `analyses.similarity` logged.
Each init's pairs share its one reference seed: their t interval is for the mean given that seed, and the
table and text say so."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

from embinit.config import metric_range
from embinit.report.table import summarize
from embinit.reproduction.compare import ci_text, fmt, mean_std
from embinit.reproduction.export import Section
from embinit.reproduction.inputs import ROLE_TEXT, ROLES, role_of
from embinit.reproduction.knn_settings import changed_text, run_settings, settings_text
from embinit.tracking.run_readers import metric_history

if TYPE_CHECKING:
    from embinit.reproduction.data import ReproductionData


def similarity_section(rep: ReproductionData) -> Section:
    metric = f"sim/knn_{rep.inputs.similarity_metric}_mean"
    s = Section("KNN match similarity between seeds")
    s.lines += [f"`{metric}`: for every token, the {rep.inputs.similarity_metric} overlap of its K nearest "
                "neighbours in two seeds' tables, averaged over tokens; each non-reference seed against the "
                "reference seed of the same init, logged during training (step 0 = at init). K and the "
                "neighbour measure (inner product or cosine) are given per experiment, as each run recorded "
                "them (older runs: the spec of the sweep that trained them, `analyses.similarity`). Not "
                "reported in the paper.", "",
                "The pairs of an init all share its one reference seed, so they are not independent draws of "
                "two seeds: the 95% interval, a t interval over the pairs, is for the mean similarity to that "
                "reference seed. It leaves out how much the mean would move with another reference seed, so "
                "as a statement about the init it may be too narrow.", ""]
    rows = []
    for g in rep.inputs.groups:
        # one run per seed, as Table 1 counts (a seed trained again under a new key is one pair, not two)
        trials = [t for role in ROLES for t in rep.main_trials(g, role)]
        have = [t for t in trials if metric in t.metrics]
        if not have:
            continue
        hist = {t.run_id: metric_history(rep.uri, t.run_id, metric).points for t in have}
        steps = sorted({st for h in hist.values() for st, _ in h})
        knn = settings_text(run_settings(have, rep.data[g.experiment][1], rep.sweep_spec).values()) + changed_text(have)
        s.lines += [f"**{g.task}, {g.source}** (`{g.experiment}`; {knn})", "",
                    "| init | at init | end of training mean (σ) | n pairs | 95% CI (given the reference seed) |",
                    "|---|---|---|---|---|"]
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
            # each step's mean is over the pairs that logged it: fewer after a pair stopped early
            at = {st: [v for t in ts for s2, v in hist[t.run_id] if s2 == st] for st in steps}
            curves[label] = ({st: statistics.fmean(v) if v else math.nan for st, v in at.items()},
                             {st: len(v) for st, v in at.items()}, sum(bool(hist[t.run_id]) for t in ts))
            rows.append({"task": g.task, "init": label, "at_init": first, "end": last,
                         "curve": {str(k): v for k, v in curves[label][0].items()},
                         "curve_n": {str(k): n for k, n in curves[label][1].items()}})
        if curves and steps:
            s.lines += _over_training(curves, steps)
        s.lines.append("")
    rep.exports["similarity"] = rows
    if not rows:
        s.lines.append(f"No trial logged `{metric}`.")
    return s


def _over_training(curves: dict[str, tuple[dict, dict, int]], steps: list[int]) -> list[str]:
    """The table of each init's mean curve ({label: (mean by step, pairs by step, the init's n pairs)}) at
    up to ~12 of the steps; a mean over fewer pairs than the init's n gives its n beside it."""
    show = steps if len(steps) <= 12 else steps[:: max(1, len(steps) // 10)] + [steps[-1]]
    show = sorted(set(show))
    lines = ["", "Over training (mean over the pairs that logged each step; columns: optimizer step; a value "
             "over fewer pairs than the init's n pairs, e.g. after a seed stopped early, gives its n):", "",
             "| init | " + " | ".join(str(x) for x in show) + " |", "|---" * (len(show) + 1) + "|"]
    for label, (mean, n, pairs) in curves.items():
        cells = [fmt(mean[x], 3) + (f" (n = {n[x]})" if 0 < n[x] < pairs else "") if n[x] else "—" for x in show]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines
