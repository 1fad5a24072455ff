"""The reproduction document's sections on the paper's Tables 1-3 and the settings they ran at, as
functions of the runs read (`ReproductionData`). Table 4 is in table4.py; the similarity and findings
sections in findings.py; the order of the sections is document.py's."""

from __future__ import annotations

import statistics
from pathlib import Path

from embinit import paper
from embinit.config import metric_range, task_defaults
from embinit.report.table import summarize
from embinit.reproduction.compare import ci_text, fmt, mean_std
from embinit.reproduction.data import ReproductionData
from embinit.reproduction.export import Section
from embinit.reproduction.inputs import ROLE_TEXT, ROLES, role_of


SETTING_FIELDS = ("source", "d_model", "heads", "layers", "epochs", "batch_size", "lr", "seeds", "vocab")


def settings(rep: ReproductionData) -> Section:
    s = Section("Settings: what differs from the paper")
    s.lines += ["Each value is that of the runs the tables read: per init, one run per seed at the search "
                "point `embinit report` reports (with a search, the best mean selection metric); a searched "
                "field shows the point chosen, per init where the inits' searches chose differently.", "",
                "| group | setting | paper | here |", "|---|---|---|---|"]
    for g in rep.inputs.groups:
        slots = {role: rep.seed_slots(g, role) for role in ROLES}
        slots = {role: ts for role, ts in slots.items() if ts}
        if not slots:
            continue
        ref = paper.SETTINGS.get((g.task, g.paper_source), {})
        searched = sorted({k for ts in slots.values() for t in ts for k in t.point})
        only_xavier = xavier_only(rep, g)
        for k in (*SETTING_FIELDS, *(k for k in searched if k not in SETTING_FIELDS)):
            here, values = _setting_text(rep, g, slots, k, only_xavier)
            # the vocabulary is built by the paper's rule (training data, min freq 2), so it is not flagged;
            # an Xavier-only group (the paper's Xavier row at its setting) has no source to compare; a
            # searched field the paper gives no value of (it does not list its grid) is not either
            same = (k == "vocab" or (k == "source" and (only_xavier or all(v in paper.RUN_AS.get(ref.get(k), ())
                                                                          for v in values)))
                    or (k in searched and k not in ref) or all(str(ref.get(k, "—")) == v for v in values))
            mark = (" (searched)" if k in searched else "") + ("" if same else " **(differs)**")
            s.lines.append(f"| {g.task} / {g.paper_source} | {k} | {ref.get(k, '—')} | {here}{mark} |")
    return s


def _setting_text(rep: ReproductionData, g, slots: dict, k: str, only_xavier: bool) -> tuple[str, list[str]]:
    """(the cell, its distinct values) of setting `k` over each role's runs (`slots`): one value when every
    role's runs share it, else each role's (e.g. the learning rate each init's search chose)."""
    defaults = task_defaults(g.task)
    by_role = {}
    for role, ts in slots.items():
        if k == "seeds":
            vals = [str(len({t.config.get("seed") for t in ts}))]
        elif k == "source":
            files = {Path(str(t.config["pretrained"])).name for t in ts if t.config.get("pretrained")}
            vals = sorted(files) if role != "Xavier" else []
        elif k == "vocab":
            rows = {int(v) for v in rep.values(ts, "init/emb/rows")}
            vals = [f"{'/'.join(f'{r:,}' for r in sorted(rows))} rows in the "
                    f"{'target ' if g.task == 'multi30k' else ''}table"] if rows and role == "P" else []
        else:
            vals = sorted({str(t.config[k] if t.config.get(k) is not None else getattr(defaults, k, None))
                           for t in ts if k in t.config})
        if vals:
            by_role[role] = vals
    values = sorted({v for vals in by_role.values() for v in vals})
    if k == "source" and (only_xavier or not values):
        return ("none (Xavier only)" if only_xavier else g.source), [] if only_xavier else [g.source]
    if len({tuple(v) for v in by_role.values()}) <= 1:
        return ("/".join(values) or "—"), values
    return "; ".join(f"{ROLE_TEXT[r].format(p=g.source)} {'/'.join(v)}" for r, v in by_role.items()), values


def xavier_only(rep: ReproductionData, g) -> bool:
    """True for a group whose trials are all Xavier (tune_configs/gpu/multi30k_xavier300.yaml: the paper's
    Xavier row at its own setting), which has no pretrained source to name or compare."""
    labels = {t.label for t in rep.data[g.experiment][0] if t.task == g.task}
    return bool(labels) and all(role_of(label, g.source) == "Xavier" for label in labels)


def table1(rep: ReproductionData) -> Section:
    s = Section("Table 1 (and Table 7): task performance per init")
    rows = []
    for g in rep.inputs.groups:
        m, mname, scale = rep.metric(g.task)
        ref = paper.TABLE1.get((g.task, g.paper_source), {})
        if not any(t.task == g.task for t in rep.data[g.experiment][0]):
            s.lines += ["", f"**{g.task}, {g.source}**: no trials in `{g.experiment}` yet."]
            continue
        block = (f"Xavier only (paper: the Xavier row of its {g.paper_source} block)" if xavier_only(rep, g)
                 else f"{g.source} (paper: {g.paper_source})")
        s.lines += ["", f"**{g.task}, {block}; {mname}; MLflow experiment "
                    f"`{g.experiment}`**", "",
                    "| init | paper mean (σ) | paper epoch | here mean (σ) | n | 95% CI | best epoch | "
                    f"{rep.metric(g.task, rep.loss(g.task))[1]} (σ) | failed | diverged |", "|---" * 10 + "|"]
        first = len(rows)
        for role in ROLES:
            slots = rep.seed_slots(g, role)   # one run per seed, as `embinit report` counts them
            trials = rep.main_trials(g, role)
            failed = [t for t in slots if t.status == "failed"]
            diverged = [t for t in slots if t.status == "diverged"]
            if not trials and not failed and not diverged:
                continue
            st = summarize(rep.scaled(g, role), rep.bounds(g.task))
            ep = summarize(rep.values(trials, "best_epoch"), metric_range("best_epoch"))
            vl = summarize(rep.values(trials, rep.loss(g.task)), metric_range("best/val/loss"))
            p = ref.get(role)
            label = ROLE_TEXT[role].format(p=g.source)
            s.lines.append(f"| {label} | {'—' if p is None else f'{p[0]} ({p[1]})'} | "
                           f"{'—' if p is None else p[2]} | {mean_std(st)} | {st['n']} | {ci_text(st)} | "
                           f"{fmt(ep['mean'], 1)} | {mean_std(vl, 3)} | {len(failed)} | {len(diverged)} |")
            rows.append({"task": g.task, "experiment": g.experiment, "init": label, "role": role,
                         "paper_mean": p[0] if p else None, "paper_std": p[1] if p else None,
                         "paper_epoch": p[2] if p else None, "metric": m, **st,
                         "best_epoch": ep["mean"], "best_val_loss": vl["mean"], "failed": len(failed),
                         "diverged": len(diverged), "runs": [t.run_id for t in trials],
                         "per_seed": rep.per_seed(trials, m, scale)})
        for m2 in rep.other_metrics(g.task):
            s.lines += _other_metric_lines(rep, g, m2, rows[first:])
    if rows:
        s.lines += ["", "Counted per seed, by the run `embinit report` counts for it (a result over a run in "
                    "progress over a failure, then the newest): n = the seeds whose run finished with a "
                    "value, failed and diverged = the seeds whose run failed or diverged (a seed that "
                    "failed and then finished on a retry is in n only)."]
    rep.exports["table1"] = rows
    return s

# the paper's numbers of a metric a task reports beside its Table-1 metric
PAPER_OTHER = {"best/val/acc_mismatched": paper.TABLE1_MISMATCHED}


def _other_metric_lines(rep: ReproductionData, g, m: str, rows: list[dict]) -> list[str]:
    """The group's Table-1 rows (`rows`, the runs its table read) on the task's other reported metric (MNLI:
    the mismatched accuracy beside the matched), each beside the paper's; `rows` get it as m's entry."""
    _, mname, scale = rep.metric(g.task, m)
    ref = PAPER_OTHER.get(m, {}).get((g.task, g.paper_source), {})
    lines = ["", f"{mname[0].upper()}{mname[1:]} of the same runs (best epoch: its own; paper: the second "
             "number of its cells):", "",
             "| init | paper mean (σ) | paper epoch | here mean (σ) | n | 95% CI | best epoch |", "|---" * 7 + "|"]
    for row in rows:
        trials = rep.main_trials(g, row["role"])
        st = summarize([v * scale for v in rep.values(trials, m)], rep.bounds(g.task))
        ep = summarize(rep.values(trials, f"{m}_epoch"), metric_range("best_epoch"))
        p = ref.get(row["role"])
        lines.append(f"| {row['init']} | {'—' if p is None else f'{p[0]} ({p[1]})'} | {'—' if p is None else p[2]} "
                     f"| {mean_std(st)} | {st['n']} | {ci_text(st)} | {fmt(ep['mean'], 1)} |")
        row[m] = {**st, "best_epoch": ep["mean"], "paper_mean": p[0] if p else None,
                  "paper_std": p[1] if p else None, "paper_epoch": p[2] if p else None,
                  "per_seed": rep.per_seed(trials, m, scale)}
    return lines


def table2(rep: ReproductionData) -> Section:
    s = Section("Table 2 / Table 6: embedding statistics at init")
    t2, t6 = paper.TABLE2[("multi30k", "GloVe")]["P_Xavier"], paper.TABLE6["P_Xavier"]
    s.lines += ["Statistics of the initialized table the trials logged (`init/emb/*`: the target table for "
                "translation, the only table for classification), mean over seeds. 'scaled' is ×√D, what "
                "enters the transformer; 'PE' are the sinusoidal encodings of the trial's `pe_positions` at the "
                "same D (default 5,000, as the paper's Table 6 at D = 300; runs logged before issue 23 used "
                "512). Absorption = σ(scaled)/σ(PE). Each paper column names its table: Table 2 (and Table 8 "
                "for Xavier_P), every block, two digits; Table 6, the Section-6 Multi30k GloVe 300d table, "
                "three digits, raw and scaled, beside the Multi30k GloVe rows only. The two print that "
                f"block's GloVe_Xavier range differently (Table 2 {t2[0]}, {t2[1]}; Table 6 {t6[0]}, {t6[1]}). "
                "Table 6's caption says its statistics are of the *encoder* table, its Xavier range from a "
                "5,893 × 300 layer (its target vocabulary, appendix A.2); that range, "
                f"±{paper.TABLE6['Xavier'][1]}, fits N ≈ 7,930 rows, not 5,893 (±0.031): compare the σ-scale, "
                "not the third digit. Here the Multi30k rows are the target table's (no German vectors: the "
                "source side is Xavier).", "",
                "| group | init | min, max | mean (σ) | paper Table 2 min, max | paper Table 2 mean (σ) | "
                "paper Table 6 min, max | scaled min, max | scaled σ | paper Table 6 scaled σ | PE σ | "
                "absorption |", "|---" * 12 + "|"]
    rows = []
    for g in rep.inputs.groups:
        ref2 = paper.TABLE2.get((g.task, g.paper_source), {})
        for role in ROLES:
            trials = rep.main_trials(g, role)
            if not trials:
                continue

            def mean(k, trials=trials):
                v = rep.values(trials, f"init/emb/{k}")
                return statistics.fmean(v) if v else None
            st = {k: mean(k) for k in ("min", "max", "mean", "std", "scaled_min", "scaled_max", "scaled_std",
                                       "pe_std", "absorption")}
            p = ref2.get(role)
            glove30k = g.task == "multi30k" and g.paper_source == "GloVe"
            p6, p6s = (paper.TABLE6.get(role), paper.TABLE6.get(f"{role} (scaled)")) if glove30k else (None, None)
            label = ROLE_TEXT[role].format(p=g.source)
            s.lines.append(
                f"| {g.task} | {label} | {fmt(st['min'], 3)}, {fmt(st['max'], 3)} | {fmt(st['mean'], 4)} "
                f"({fmt(st['std'], 4)}) | {'—' if p is None else f'{p[0]}, {p[1]}'} | "
                f"{'—' if p is None else f'{p[2]} ({p[3]})'} | {'—' if p6 is None else f'{p6[0]}, {p6[1]}'} | "
                f"{fmt(st['scaled_min'], 2)}, {fmt(st['scaled_max'], 2)} | {fmt(st['scaled_std'], 3)} | "
                f"{'—' if p6s is None else p6s[3]} | {fmt(st['pe_std'], 3)} | {fmt(st['absorption'], 2)} |")
            rows.append({"task": g.task, "init": label, "role": role, **st,
                         "paper": list(p) if p else None, "paper_table6": list(p6) if p6 else None,
                         "paper_scaled_std": p6s[3] if p6s else None})
    pe = paper.TABLE6["Pos. Enc."]
    s.lines += ["", f"The paper's position encodings (Table 6): min, max {pe[0]}, {pe[1]}; "
                    f"mean {pe[2]} (σ {pe[3]})."]
    rep.exports["table2"] = rows
    return s


def table3(rep: ReproductionData) -> Section:
    g = next((g for g in rep.inputs.groups if g.task == "multi30k"), None)
    s = Section("Table 3: trainable embeddings × position encoding (Multi30k)")
    if g is None:
        s.lines.append("No translation group configured.")
        return s
    s.lines += [f"Cells are read from each trial's config in `{g.experiment}`; the trainable + PE cell is "
                "the main sweep's trials (same trial keys, the same seeds as Table 1).", "",
                "| init | train/pos | paper val. loss (epoch) | paper BLEU (σ) | here val. loss (σ) | "
                "best epoch | here BLEU (σ) | n | 95% CI | failed | diverged |", "|---" * 11 + "|"]
    rows = []
    for role in ("Xavier", "P", "P_Xavier"):
        for cell in ((False, False), (True, False), (False, True), (True, True)):
            slots = rep.seed_slots(g, role, cell)   # one run per seed, as Table 1 and `embinit report` count
            ts = [t for t in slots if t.status == "finished"]
            failed = [t for t in slots if t.status == "failed"]
            diverged = [t for t in slots if t.status == "diverged"]
            p = paper.TABLE3.get((role, *cell))
            bleu = summarize(rep.values(ts, "test/bleu"), metric_range("test/bleu"))
            vl = summarize(rep.values(ts, "best/val/loss"), metric_range("best/val/loss"))
            ep = summarize(rep.values(ts, "best_epoch"), metric_range("best_epoch"))
            label = ROLE_TEXT[role].format(p=g.source)
            yn = "/".join("yes" if c else "no" for c in cell)
            s.lines.append(f"| {label} | {yn} | {'—' if p is None else f'{p[0]} ({p[1]})'} | "
                           f"{'—' if p is None else f'{p[2]} ({p[3]})'} | {mean_std(vl, 3)} | "
                           f"{fmt(ep['mean'], 1)} | "
                           f"{mean_std(bleu)} | {bleu['n']} | {ci_text(bleu)} | {len(failed)} | {len(diverged)} |")
            rows.append({"init": label, "role": role, "train_embeddings": cell[0], "pos_encoding": cell[1],
                         "bleu": {**bleu, "per_seed": rep.per_seed(ts, "test/bleu")},
                         "val_loss": {**vl, "per_seed": rep.per_seed(ts, "best/val/loss")},
                         "best_epoch": ep["mean"], "paper": list(p) if p else None,
                         "seeds": sorted(t.config.get("seed") for t in ts), "failed": len(failed),
                         "diverged": len(diverged), "runs": [t.run_id for t in ts]})
    s.lines += ["", "Counted per seed, by the run `embinit report` counts for it (a result over a run in progress "
                "over a failure, then the newest), as Table 1 is: n = the seeds whose run finished with a value, "
                "failed and diverged = the seeds whose run failed or diverged (a seed trained again under a new "
                "key, e.g. with more epochs, counts once)."]
    rep.exports["table3"] = rows
    return s
