"""The reproduction document's sections built from the runs: settings, Tables 1-4 (the similarity,
findings and run sections are in findings.py)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from embinit import mlflow_store, paper, run_readers
from embinit.config import metric_range, task_defaults
from embinit.errors import EmbinitError
from embinit.report import summarize
from embinit.reproduction.blog import blog_section
from embinit.reproduction.compare import ci_text, fmt, mean_std
from embinit.reproduction.beyond import beyond_sections
from embinit.reproduction.export import Section
from embinit.task_registry import primary_metric
from embinit.reproduction.findings import findings_section, similarity_section
from embinit.reproduction.inputs import (ROLE_TEXT, ROLES, Group, Inputs, Trial, load_artifact_text, load_trials,
                                         role_of)



class Reproduction:
    def __init__(self, uri: str | None, inputs: Inputs | None = None):
        self.uri, self.inputs = uri, inputs or Inputs()
        self.data: dict[str, tuple[list[Trial], list]] = {}
        self.missing: list[str] = []     # experiments not in the store yet (a partial run): shown as such
        errors = []
        for g in self.inputs.groups:
            try:
                self.data[g.experiment] = load_trials(g.experiment, uri)
            except EmbinitError as e:
                self.data[g.experiment], errors = ([], []), errors + [str(e)]
                self.missing.append(g.experiment)
        self.analogy_runs = run_readers.analysis_records(self.inputs.analogy_experiment, uri, "analogy")
        studies = (self.inputs.dose_experiment, self.inputs.oov_experiment)   # beyond the paper
        if len(self.missing) == len(self.inputs.groups) and not self.analogy_runs and \
                not any(mlflow_store.experiment_id(e, uri) is not None for e in studies):
            raise EmbinitError(errors[0] if len(errors) == 1 else "; ".join(errors))
        self.exports: dict[str, list[dict[str, Any]]] = {}

    # ---- selection helpers
    def main_trials(self, g: Group, role: str) -> list[Trial]:
        """Finished trials of a role in the group's main sweep (default cell: trainable + PE)."""
        return [t for t in self.data[g.experiment][0] if t.task == g.task and role_of(t.label, g.source) == role
                and t.cell == (True, True) and t.status == "finished"]

    def values(self, trials: list[Trial], metric: str) -> list[float]:
        return [t.metrics[metric] for t in trials if metric in t.metrics and math.isfinite(t.metrics[metric])]

    @staticmethod
    def metric(task: str) -> tuple[str, str, float]:
        """(metric, its name, scale to the paper's units)."""
        m = primary_metric(task)
        return (m, "test BLEU", 1.0) if "bleu" in m else (m, "best val. accuracy (%)", 100.0)

    def bounds(self, task: str) -> tuple[float, float]:
        """The range of the task's metric in the paper's units (confidence intervals are clipped to it)."""
        m, _, scale = self.metric(task)
        return tuple(b * scale for b in metric_range(m))

    def scaled(self, g: Group, role: str) -> list[float]:
        m, _, scale = self.metric(g.task)
        return [v * scale for v in self.values(self.main_trials(g, role), m)]

    # ---- sections
    def settings(self) -> Section:
        s = Section("Settings: what differs from the paper")
        s.lines += ["| group | setting | paper | here |", "|---|---|---|---|"]
        for g in self.inputs.groups:
            trials = [t for t in self.data[g.experiment][0] if t.task == g.task and t.cell == (True, True)]
            if not trials:
                continue
            defaults = task_defaults(g.task)
            cfg = {k: (v if v is not None else getattr(defaults, k, None)) for k, v in trials[0].config.items()}
            seeds = sorted({t.config.get("seed") for t in trials})
            ref = paper.SETTINGS.get((g.task, g.paper_source), {})
            p_trials = [t for t in trials if role_of(t.label, g.source) == "P"]
            rows_src = self.values(p_trials, "init/emb/rows")
            src_file = p_trials[0].config.get("pretrained") if p_trials else None
            here = {"source": Path(str(src_file)).name if src_file else g.source, "d_model": cfg.get("d_model"),
                    "heads": cfg.get("heads"), "layers": cfg.get("layers"), "epochs": cfg.get("epochs"),
                    "batch_size": cfg.get("batch_size"), "lr": cfg.get("lr"), "seeds": len(seeds),
                    "vocab": f"{int(rows_src[0]):,} rows in the {'target ' if g.task == 'multi30k' else ''}table"
                    if rows_src else "—"}
            for k in ("source", "d_model", "heads", "layers", "epochs", "batch_size", "lr", "seeds", "vocab"):
                # the vocabulary is built by the paper's rule (training data, min freq 2), so it is not flagged
                mark = "" if k == "vocab" or str(ref.get(k, "—")) == str(here[k]) else " **(differs)**"
                s.lines.append(f"| {g.task} / {g.paper_source} | {k} | {ref.get(k, '—')} | {here[k]}{mark} |")
        return s

    def table1(self) -> Section:
        s = Section("Table 1 (and Table 7): task performance per init")
        rows = []
        for g in self.inputs.groups:
            m, mname, _ = self.metric(g.task)
            ref = paper.TABLE1.get((g.task, g.paper_source), {})
            if not any(t.task == g.task for t in self.data[g.experiment][0]):
                s.lines += ["", f"**{g.task}, {g.source}**: no trials in `{g.experiment}` yet."]
                continue
            s.lines += ["", f"**{g.task}, {g.source} (paper: {g.paper_source}); {mname}; MLflow experiment "
                        f"`{g.experiment}`**", "",
                        "| init | paper mean (σ) | paper epoch | here mean (σ) | n | 95% CI | best epoch | "
                        "best val. loss (σ) | failed |", "|---" * 9 + "|"]
            for role in ROLES:
                trials = self.main_trials(g, role)
                failed = [t for t in self.data[g.experiment][0] if t.task == g.task and t.cell == (True, True)
                          and role_of(t.label, g.source) == role and t.status in ("failed", "diverged")]
                if not trials and not failed:
                    continue
                st = summarize(self.scaled(g, role), self.bounds(g.task))
                ep = summarize(self.values(trials, "best_epoch"), metric_range("best_epoch"))
                vl = summarize(self.values(trials, "best/val/loss"), metric_range("best/val/loss"))
                p = ref.get(role)
                label = ROLE_TEXT[role].format(p=g.source)
                s.lines.append(f"| {label} | {'—' if p is None else f'{p[0]} ({p[1]})'} | "
                               f"{'—' if p is None else p[2]} | {mean_std(st)} | {st['n']} | {ci_text(st)} | "
                               f"{fmt(ep['mean'], 1)} | {mean_std(vl, 3)} | {len(failed)} |")
                rows.append({"task": g.task, "experiment": g.experiment, "init": label, "role": role,
                             "paper_mean": p[0] if p else None, "paper_std": p[1] if p else None,
                             "paper_epoch": p[2] if p else None, "metric": m, **st,
                             "best_epoch": ep["mean"], "best_val_loss": vl["mean"], "failed": len(failed),
                             "runs": [t.run_id for t in trials]})
        self.exports["table1"] = rows
        return s

    def table2(self) -> Section:
        s = Section("Table 2 / Table 6: embedding statistics at init")
        s.lines += ["Statistics of the initialized table the trials logged (`init/emb/*`: the target table for "
                    "translation, the only table for classification), mean over seeds. 'scaled' is ×√D, what "
                    "enters the transformer; 'PE' are the sinusoidal encodings of the trial's `pe_positions` at the "
                    "same D (default 5,000, as the paper's Table 6 at D = 300; runs logged before issue 23 used "
                    "512). Absorption = σ(scaled)/σ(PE).", "",
                    "| group | init | min, max | mean (σ) | paper min, max | paper mean (σ) | scaled min, max | "
                    "scaled σ | paper scaled σ | PE σ | absorption |", "|---" * 11 + "|"]
        rows = []
        for g in self.inputs.groups:
            ref2 = paper.TABLE2.get((g.task, g.paper_source), {})
            for role in ROLES:
                trials = self.main_trials(g, role)
                if not trials:
                    continue

                def mean(k, trials=trials):
                    v = self.values(trials, f"init/emb/{k}")
                    return statistics.fmean(v) if v else None
                st = {k: mean(k) for k in ("min", "max", "mean", "std", "scaled_min", "scaled_max", "scaled_std",
                                           "pe_std", "absorption")}
                p = ref2.get(role)
                glove30k = g.task == "multi30k" and g.paper_source == "GloVe"
                p6 = paper.TABLE6.get(f"{role} (scaled)") if glove30k else None
                label = ROLE_TEXT[role].format(p=g.source)
                s.lines.append(
                    f"| {g.task} | {label} | {fmt(st['min'], 3)}, {fmt(st['max'], 3)} | {fmt(st['mean'], 4)} "
                    f"({fmt(st['std'], 4)}) | {'—' if p is None else f'{p[0]}, {p[1]}'} | "
                    f"{'—' if p is None else f'{p[2]} ({p[3]})'} | {fmt(st['scaled_min'], 2)}, "
                    f"{fmt(st['scaled_max'], 2)} | {fmt(st['scaled_std'], 3)} | {'—' if p6 is None else p6[3]} | "
                    f"{fmt(st['pe_std'], 3)} | {fmt(st['absorption'], 2)} |")
                rows.append({"task": g.task, "init": label, "role": role, **st,
                             "paper": list(p) if p else None, "paper_scaled_std": p6[3] if p6 else None})
        pe = paper.TABLE6["Pos. Enc."]
        s.lines += ["", f"The paper's position encodings (Table 6): min, max {pe[0]}, {pe[1]}; "
                        f"mean {pe[2]} (σ {pe[3]})."]
        self.exports["table2"] = rows
        return s

    def table3(self) -> Section:
        g = next((g for g in self.inputs.groups if g.task == "multi30k"), None)
        s = Section("Table 3: trainable embeddings × position encoding (Multi30k)")
        if g is None:
            s.lines.append("No translation group configured.")
            return s
        s.lines += [f"Cells are read from each trial's config in `{g.experiment}`; the trainable + PE cell is "
                    "the main sweep's trials (same trial keys). Here n = the seeds that ran each cell.", "",
                    "| init | train/pos | paper val. loss (epoch) | paper BLEU (σ) | here val. loss (σ) | "
                    "best epoch | here BLEU (σ) | n | 95% CI |", "|---" * 9 + "|"]
        rows = []
        trials = [t for t in self.data[g.experiment][0] if t.task == g.task and t.status == "finished"]
        for role in ("Xavier", "P", "P_Xavier"):
            for cell in ((False, False), (True, False), (False, True), (True, True)):
                ts = [t for t in trials if role_of(t.label, g.source) == role and t.cell == cell]
                p = paper.TABLE3.get((role, *cell))
                bleu = summarize(self.values(ts, "test/bleu"), metric_range("test/bleu"))
                vl = summarize(self.values(ts, "best/val/loss"), metric_range("best/val/loss"))
                ep = summarize(self.values(ts, "best_epoch"), metric_range("best_epoch"))
                label = ROLE_TEXT[role].format(p=g.source)
                yn = "/".join("yes" if c else "no" for c in cell)
                s.lines.append(f"| {label} | {yn} | {'—' if p is None else f'{p[0]} ({p[1]})'} | "
                               f"{'—' if p is None else f'{p[2]} ({p[3]})'} | {mean_std(vl, 3)} | "
                               f"{fmt(ep['mean'], 1)} | "
                               f"{mean_std(bleu)} | {bleu['n']} | {ci_text(bleu)} |")
                rows.append({"init": label, "role": role, "train_embeddings": cell[0], "pos_encoding": cell[1],
                             "bleu": bleu, "val_loss": vl, "best_epoch": ep["mean"], "paper": list(p) if p else None,
                             "seeds": sorted(t.config.get("seed") for t in ts)})
        self.exports["table3"] = rows
        return s

    def table4(self) -> Section:
        s = Section("Table 4: word analogies under the paper's transformation chain")
        runs = self.analogy_runs
        if not runs:
            s.lines.append(f"No `analogy` runs in experiment `{self.inputs.analogy_experiment}`.")
            return s
        results = sorted((json.loads(load_artifact_text(r, "result.json")) for r in runs),
                         key=lambda r: str(r.get("params", {}).get("seed")))
        first = results[0]
        prm = first.get("params", {})
        s.lines += [f"{len(runs)} runs (seeds of the random positions: "
                    f"{', '.join(str(r.get('params', {}).get('seed')) for r in results)}) in experiment "
                    f"`{self.inputs.analogy_experiment}`; embeddings `{Path(str(prm.get('embeddings'))).name}`, "
                    f"vocabulary: the {prm.get('top')} most frequent target words of `{prm.get('task')}` "
                    f"({prm.get('words')} found in the vectors); questions `{Path(str(prm.get('questions'))).name}`.",
                    "", "| row | paper | here correct/applicable | here acc. % mean (σ) | n | 95% CI | "
                    "σ(words)/σ(PE) |", "|---|---|---|---|---|---|---|"]
        rows = []
        for i, row in enumerate(first["rows"]):
            accs = [r["rows"][i]["accuracy"] for r in results if r["rows"][i]["accuracy"] is not None]
            corr = [r["rows"][i]["correct"] for r in results]
            ratios = [r["rows"][i]["pe_ratio"] for r in results if r["rows"][i].get("pe_ratio") is not None]
            ratio = statistics.fmean(ratios) if ratios else None
            st = summarize(accs, (0.0, 100.0))  # percentages
            rng = f"{min(corr)}–{max(corr)}" if min(corr) != max(corr) else str(corr[0])
            s.lines.append(f"| {row['label']} | {row.get('paper') or '—'} | {rng}/{row['total']} | {mean_std(st, 1)} | "
                           f"{st['n']} | {ci_text(st, 1)} | {fmt(ratio, 3)} |")
            rows.append({"row": row["label"], "steps": row["steps"], "paper": row.get("paper"), "total": row["total"],
                         "correct": corr, "pe_ratio": ratio, **st})
        self.exports["table4"] = rows
        s.lines += ["", *table4_ratio_lines(results, self.exports)]
        return s

    def similarity(self) -> Section:
        return similarity_section(self)

    def findings(self) -> Section:
        return findings_section(self)

    def runs_section(self) -> Section:
        from embinit.reproduction.runs import how_it_was_run
        return how_it_was_run(self)

    def build(self) -> list[Section]:
        return [self.settings(), self.table1(), self.table2(), self.table3(), self.table4(), self.similarity(),
                blog_section(self), self.findings(), *beyond_sections(self), self.runs_section()]


# σ of the paper's tables at D = 300 (Table 6): GloVe 840B raw, a Xavier table (= GloVe_Xavier), the
# position encodings; with them the ratio σ(words)/σ(PE) of each of the paper's Table-4 rows with encodings
def paper_ratio_rows() -> list[dict]:
    g, x, pe = paper.TABLE6["P"][3], paper.TABLE6["Xavier"][3], paper.TABLE6["Pos. Enc."][3]
    return [{"row": "GloVe & Pos. Enc.", "ratio": g / pe, "accuracy": 87.3},
            {"row": "GloVe & Xavier-Std. & Pos. Enc.", "ratio": x / pe, "accuracy": 12.9},
            {"row": "GloVe & (Pos. Enc. × σp/σx)", "ratio": g / (pe * g / x), "accuracy": 11.1}]


def table4_ratio_lines(results: list[dict], exports: dict) -> list[str]:
    """Accuracy against σ(words)/σ(PE): the paper's rows (D = 300, its Table 6 σ) and here (the rows
    above, and the ratio sweep of `embinit analogy --table4`: the same rows rescaled to each ratio)."""
    lines = ["Accuracy against σ(words)/σ(PE), the spread of the word vectors over that of the encodings "
             "added to them. The paper's rows, from its Table 6 σ at D = 300 (GloVe 0.37, Xavier 0.016, "
             "encodings 0.67):", "", "| paper row | σ(words)/σ(PE) | paper acc. % |", "|---|---|---|"]
    paper_rows = paper_ratio_rows()
    lines += [f"| {r['row']} | {r['ratio']:.3f} | {r['accuracy']} |" for r in paper_rows]
    sweeps = [r.get("ratio_sweep") or [] for r in results]
    grid = sorted({x["ratio"] for sw in sweeps for x in sw})
    out = []
    if grid:
        lines += ["", "Here (D of the vectors above): the vectors rescaled so that σ(words)/σ(PE) takes each "
                  "value, one draw of positions per seed, accuracy mean (σ) over the seeds:", "",
                  "| σ(words)/σ(PE) | acc. % mean (σ) | n |", "|---|---|---|"]
        for ratio in grid:
            accs = [x["accuracy"] for sw in sweeps for x in sw if x["ratio"] == ratio and x["accuracy"] is not None]
            st = summarize(accs, (0.0, 100.0))
            lines.append(f"| {ratio:g} | {mean_std(st, 1)} | {st['n']} |")
            out.append({"ratio": ratio, **st})
    else:
        lines += ["", "No ratio sweep in these analogy runs (recorded before `embinit analogy --table4` "
                  "logged one)."]
    exports["table4_ratio"] = {"paper": paper_rows, "here": out}
    return lines
