"""Two studies beyond the paper (issue 23), as sections of the reproduction document:

- the dose-response of the embedding scale: the metric against the target sigma (`axes: {sigma: ...}`,
  the `rescale` transform) per source, with seed bands, and per sigma the paired differences that
  separate the distribution effect (P_Shuffled − Xavier: same values, no semantics) from the semantic
  one (P − P_Shuffled: same values, real rows); where a difference changes sign the curves cross;
- the OOV rules compared (`axes: {oov: ...}`), on the whole splits and on the sentences whose target
  holds an OOV word (`oov/*`, embinit.train.oov_subset), with paired differences against `xavier`.

Comparisons are the findings' paired t 95% intervals on per-seed differences (`compare.paired`; seeds
pair across inits: one seed, one data order and one draw of the other weights). An experiment missing
from the store is shown as not run. Figures (`write_figures`) go beside the exports. reproduction.json holds
the cells (`dose_response`, `oov_rules`) and each contrast the document shows (`dose_response_contrasts`,
`oov_rules_contrasts`: the comparison, its Holm adjustment, the seeds paired and both cells' per_seed).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from embinit.comparison import direction
from embinit.errors import EmbinitError
from embinit.reproduction.beyond_figures import DOSE_FIGURE, DOSE_METRICS, OOV_FIGURE, OOV_METRICS
from embinit.report.baseline import adjust, holm_mark
from embinit.reproduction.compare import compare_text, fmt, p_holm_text, paired
from embinit.reproduction.export import Section
from embinit.reproduction.inputs import load_trials
from embinit.tracking import records

SOURCE_ORDER = ("Xavier", "GloVe_Shuffled", "GloVe")


def _finished(rep, experiment: str) -> list | None:
    """The experiment's finished trials (None when it is not in the store)."""
    try:
        trials, _ = load_trials(experiment, rep.uri)
    except EmbinitError:
        return None
    return [t for t in trials if t.status == "finished"]


def sigma_multiple(value: Any) -> float | None:
    """`4x` -> 4.0; a value not given as a multiple of Xavier's sigma -> None (not on the plot's axis)."""
    text = str(value).strip().lower()
    try:
        return float(text[:-1]) if text.endswith("x") else None
    except ValueError:
        return None


def _per_seed(trials, metric: str) -> dict[int, Any]:
    """seed -> the run that stands for the seed (`records.stand_ins`, the rule `embinit report` and the
    paper's sections count by: a seed run again under another key counts once, by its newest finished
    run), where that run has a finite `metric`."""
    chosen = records.stand_ins(trials, lambda t: t.seed)
    return {seed: t for seed, t in chosen.items() if metric in t.metrics and math.isfinite(t.metrics[metric])}


def _by_seed(trials, metric: str, **match) -> dict[int, Any]:
    return _per_seed([t for t in trials if all(getattr(t, k) == v if k != "axis" else t.axes.get(v[0]) == v[1]
                                               for k, v in match.items())], metric)


def _summary(runs: dict[int, Any], metric: str) -> dict[str, Any]:
    """The seeds' `metric`: mean, σ, n, range; `values` (seed -> value, what the contrasts pair) and
    `per_seed` (seed -> value and run id, as the paper's sections export them: review M6)."""
    values = {seed: t.metrics[metric] for seed, t in runs.items()}
    v = list(values.values())
    return {"mean": statistics.fmean(v) if v else None, "std": statistics.stdev(v) if len(v) > 1 else None,
            "n": len(v), "min": min(v, default=None), "max": max(v, default=None), "values": values,
            "per_seed": {str(seed): {"value": t.metrics[metric], "run_id": t.run_id} for seed, t in runs.items()}}


def _cell(s: dict[str, Any], digits: int) -> str:
    if s["mean"] is None:
        return "—"
    return f"{fmt(s['mean'], digits)} ({fmt(s['std'], digits)}; n={s['n']})"


def _scale(trials) -> str:
    """What the trials ran: the settings that size a trial, and their wall-clock, read from the runs."""
    def one(key):
        values = sorted({str(t.config.get(key)) for t in trials})
        return values[0] if len(values) == 1 else "/".join(values)
    walls = [t.metrics["wall_time_s"] for t in trials if "wall_time_s" in t.metrics]
    wall = f"; wall-clock per trial: median {statistics.median(walls) / 60:.1f} min" if walls else ""
    return (f"Scale as run: task {one('task')}, max_train_examples {one('max_train_examples')}, epochs "
            f"{one('epochs')}, batch {one('batch_size')}, lr {one('lr')}, D {one('d_model')}, device "
            f"{one('device')}{wall}.")


def _not_run(title: str, spec: str) -> Section:
    return Section(title, [f"Not in this MLflow store yet: `embinit run {spec}` writes it."])


def _dose_rows(trials) -> list[dict[str, Any]]:
    sigmas = sorted({t.axes.get("sigma") for t in trials if "sigma" in t.axes},
                    key=lambda s: (sigma_multiple(s) is None, sigma_multiple(s) or 0, str(s)))
    labels = [s for s in SOURCE_ORDER if any(t.label == s for t in trials)]
    labels += sorted({t.label for t in trials} - set(labels))
    rows = []
    for metric, _, _ in DOSE_METRICS:
        for label in labels:
            for sigma in sigmas:
                s = _summary(_by_seed(trials, metric, label=label, axis=("sigma", sigma)), metric)
                rows.append({"metric": metric, "source": label, "sigma": sigma,
                             "multiple": sigma_multiple(sigma), **s})
    return rows


HOLM_NOTE = ("p: the test's two-sided p-value, with Holm's adjustment over the metric's comparisons listed here "
             "(m); an interval that excludes 0 but whose adjusted p is not below 0.05 is marked *not after Holm*: "
             "treat it as tentative.")


def _crossing(diffs: list[tuple[Any, float | None]]) -> str:
    """Where a mean difference changes sign along the sigma series."""
    pts = [(s, d) for s, d in diffs if d is not None]
    flips = [f"between {a} and {b}" for (a, da), (b, db) in zip(pts, pts[1:]) if da * db < 0]
    return ("changes sign " + ", ".join(flips)) if flips else "keeps its sign over the series"


def _compared(a: dict, b: dict, metric: str) -> dict[str, Any]:
    """a − b paired on the shared seeds, with the report's verdict (the interval excludes 0: better or worse)."""
    cmp = paired(a, b)
    return {**cmp, "verdict": direction(cmp, metric)}


def _exported(cmp: dict[str, Any], cell_a: dict | None, cell_b: dict | None, **where) -> dict[str, Any]:
    """A contrast as reproduction.json holds it (the findings' shape): `where` (metric, a, b; sigma), the
    comparison as the document shows it (diff, ci95 and its ci_low/ci_high, p, p_holm, holm_m,
    holds_after_holm, n, pairs, test, reason, verdict), `seeds` (the seeds paired) and `per_seed`
    ({"a": ..., "b": ...}: the cells' values by seed, what the interval is computed from)."""
    ci = cmp["ci95"]
    low, high = (cmp["diff"] - ci, cmp["diff"] + ci) if ci is not None and cmp["diff"] is not None else (None, None)
    cell_a, cell_b = cell_a or {}, cell_b or {}
    shared = sorted(set(cell_a.get("values", {})) & set(cell_b.get("values", {})), key=str)
    seeds = [str(k) for k in shared] if cmp.get("pairs") else []
    return {**where, **cmp, "n": list(cmp["n"]), "ci_low": low, "ci_high": high, "seeds": seeds,
            "per_seed": {"a": cell_a.get("per_seed", {}), "b": cell_b.get("per_seed", {})}}


def _mark(cmp: dict[str, Any]) -> str:
    """After a comparison's text: its p with Holm's over its family, and whether its interval excludes 0
    (then also whether that holds after Holm's adjustment)."""
    excludes = " **(interval excludes 0)**" + holm_mark(cmp) if cmp["verdict"] != "inconclusive" else ""
    return p_holm_text(cmp) + excludes


def _contrasts(rows, metric: str, pairs: list[tuple[str, str]], digits: int,
               exported: list[dict[str, Any]]) -> list[str]:
    """Each (a, b) of `pairs` at every sigma, adjusted by Holm's method together: one family per metric;
    each contrast is appended to `exported` (`_exported`) as the document shows it."""
    cells = {(r["source"], r["sigma"]): r for r in rows if r["metric"] == metric}
    sigmas = list(dict.fromkeys(r["sigma"] for r in rows if r["metric"] == metric))
    sources = {src for src, _ in cells}
    pairs = [(a, b) for a, b in pairs if a in sources and b in sources]
    compared = {(a, b, sigma): _compared(cells.get((a, sigma), {}).get("values", {}),
                                         cells.get((b, sigma), {}).get("values", {}), metric)
                for a, b in pairs for sigma in sigmas}
    adjust(list(compared.values()))
    exported += [_exported(cmp, cells.get((a, sigma)), cells.get((b, sigma)), metric=metric, a=a, b=b, sigma=sigma)
                 for (a, b, sigma), cmp in compared.items()]
    out = []
    for a, b in pairs:
        diffs = [(sigma, compared[a, b, sigma]["diff"]) for sigma in sigmas]
        out.append(f"- {a} − {b} ({_crossing(diffs)}):")
        out += [f"  - σ = {sigma}: {compare_text(a, b, compared[a, b, sigma], digits)}{_mark(compared[a, b, sigma])}"
                for sigma in sigmas]
    return out


def dose_response_section(rep) -> Section:
    title = "Beyond the paper: the embedding scale, a dose–response study (issue 23)"
    trials = _finished(rep, rep.inputs.dose_experiment)
    if not trials:
        return _not_run(title, rep.inputs.dose_spec)
    rows = _dose_rows(trials)
    rep.exports["dose_response"] = rows
    contrasts: list[dict[str, Any]] = []
    rep.exports["dose_response_contrasts"] = contrasts   # filled by _contrasts below, metric by metric
    sigmas = list(dict.fromkeys(r["sigma"] for r in rows))
    lines = [f"Spec `{rep.inputs.dose_spec}` (experiment `{rep.inputs.dose_experiment}`, {len(trials)} finished "
             "trials). The target table of each source is rescaled to σ (`rescale=<σ>`: rows centered, then "
             "scaled; `1x` is the paper's P_Xavier); the source table stays Xavier. Cells: mean (σ across "
             f"seeds; n seeds). {_scale(trials)}", "",
             f"![metric against σ per source, seed bands]({_figure_link(rep, DOSE_FIGURE)})", ""]
    for metric, name, _ in DOSE_METRICS:
        digits = 2 if "bleu" in metric else 3
        lines += [f"**{name}** (`{metric}`)", "", "| source | " + " | ".join(f"σ = {s}" for s in sigmas) + " |",
                  "|---|" + "---|" * len(sigmas)]
        for src in dict.fromkeys(r["source"] for r in rows):
            cells = {r["sigma"]: r for r in rows if r["metric"] == metric and r["source"] == src}
            lines.append(f"| {src} | " + " | ".join(_cell(cells[s], digits) for s in sigmas) + " |")
        lines += ["", "Paired differences per σ (paired t, 95%): the semantic effect (GloVe − GloVe_Shuffled) "
                  f"and the distribution effect (GloVe_Shuffled − Xavier). {HOLM_NOTE}", ""]
        lines += _contrasts(rows, metric, [("GloVe", "GloVe_Shuffled"), ("GloVe_Shuffled", "Xavier"),
                                           ("GloVe", "Xavier")], digits, contrasts) + [""]
    return Section(title, lines)


def _oov_rows(trials) -> list[dict[str, Any]]:
    rules = sorted({t.axes.get("oov", t.config.get("oov")) for t in trials},
                   key=lambda r: (r != "xavier", str(r)))
    rows = []
    for metric, _, _ in OOV_METRICS:
        for rule in rules:
            runs = _per_seed([t for t in trials if t.config.get("oov") == rule], metric)
            rows.append({"metric": metric, "rule": rule, **_summary(runs, metric)})
    return rows


def oov_rules_section(rep) -> Section:
    title = "Beyond the paper: rows the source lacks, the OOV rules compared (issue 23)"
    trials = _finished(rep, rep.inputs.oov_experiment)
    if not trials:
        return _not_run(title, rep.inputs.oov_spec)
    rows = _oov_rows(trials)
    rep.exports["oov_rules"] = rows
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    sizes = {m: statistics.fmean(t.metrics[m] for t in trials if m in t.metrics) if any(
        m in t.metrics for t in trials) else None for m in ("oov/val_sentences", "oov/test_sentences")}
    lines = [f"Spec `{rep.inputs.oov_spec}` (experiment `{rep.inputs.oov_experiment}`, {len(trials)} finished "
             f"trials). OOV sentences: {fmt(sizes['oov/val_sentences'], 0)} validation and "
             f"{fmt(sizes['oov/test_sentences'], 0)} test pairs whose target holds a word the source lacks. "
             f"Cells: mean (σ across seeds; n seeds). {_scale(trials)}", "",
             f"![OOV rules]({_figure_link(rep, OOV_FIGURE)})", "",
             "| metric | " + " | ".join(f"`{r}`" for r in rules) + " |", "|---|" + "---|" * len(rules)]
    for metric, name, _ in OOV_METRICS:
        digits = 2 if "bleu" in metric else 3
        cells = {r["rule"]: r for r in rows if r["metric"] == metric}
        lines.append(f"| {name} | " + " | ".join(_cell(cells[r], digits) for r in rules) + " |")
    pairs = [(r, "xavier") for r in rules if r != "xavier"]
    pairs += [("focus", r) for r in rules if "focus" in rules and r not in ("focus", "xavier")]
    lines += ["", "Paired differences (paired t, 95%): each rule against the default `xavier`, then `focus` "
              f"against the other rules. {HOLM_NOTE}", ""]
    contrasts: list[dict[str, Any]] = []
    for metric, name, _ in OOV_METRICS:
        cells = {r["rule"]: r for r in rows if r["metric"] == metric}
        family = {(a, b): _compared(cells.get(a, {}).get("values", {}), cells.get(b, {}).get("values", {}), metric)
                  for a, b in pairs}
        adjust(list(family.values()))
        for (a, b), cmp in family.items():
            lines.append(f"- {name}: {compare_text(a, b, cmp, 2 if 'bleu' in metric else 3)}{_mark(cmp)}")
            contrasts.append(_exported(cmp, cells.get(a), cells.get(b), metric=metric, a=a, b=b))
    rep.exports["oov_rules_contrasts"] = contrasts
    return Section(title, lines)


def beyond_sections(rep) -> list[Section]:
    return [dose_response_section(rep), oov_rules_section(rep)]


def _figure_link(rep, name: str) -> str:
    return f"{rep.inputs.figure_dir}/{name}"
