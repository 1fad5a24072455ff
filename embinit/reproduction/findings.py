"""The reproduction's findings section: a function of the runs read (`ReproductionData`)."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

from embinit.comparison import DIVERGENCE_RULE, divergence_rule
from embinit.report.baseline import adjust, holm_mark
from embinit import paper
from embinit.reproduction.compare import (compare_text, favours, fmt, p_holm_text, paired,
                                         verdict)
from embinit.reproduction.export import Section
from embinit.reproduction.frame import NOT_COMPARABLE, budget_gap
from embinit.reproduction.inputs import ROLE_TEXT, SHUFFLE_TEXT, Group
from embinit.reproduction.table4 import table4_rows

if TYPE_CHECKING:
    from embinit.reproduction.data import ReproductionData


def _by_seed(rep: ReproductionData, g: Group, role: str, metric: str, scale: float = 1.0) -> dict:
    """{seed: value} of a role's finished main trials (one run per seed: `ReproductionData.seed_slots`)."""
    out = {}
    for t in rep.main_trials(g, role):
        v = t.metrics.get(metric)
        if v is not None and math.isfinite(v):
            out[t.config.get("seed")] = v * scale
    return out


def _seeds_lost(rep: ReproductionData, g: Group, role: str, metric: str) -> tuple[int, int]:
    """(the role's seeds whose run diverged, its seeds that diverged or finished with `metric` logged):
    the same slots as `_by_seed` (`ReproductionData.seed_slots`), counted as the report counts a row's."""
    slots = rep.seed_slots(g, role)
    lost = sum(t.status == "diverged" for t in slots)
    return lost, lost + sum(t.status == "finished" and metric in t.metrics for t in slots)


def _qualified(rep: ReproductionData, g: Group, a: str, b: str, metric: str, cmp: dict, said: str,
               names: tuple[str, str], expected: int) -> dict:
    """The verdict `said` on a − b (`cmp`, on `metric`; `expected` the claim's sign on the task metric)
    as the report's rule qualifies it for the seeds each side lost to divergence
    (`comparison.divergence_rule`): `inconclusive` where the side the verdict speaks for (`favours`: the
    interval's side, or the side an "on par" / "does not reproduce" reading grants) lost seeds, with
    `survivor_verdict`, `diverged` and `note`."""
    (la, na), (lb, nb) = _seeds_lost(rep, g, a, metric), _seeds_lost(rep, g, b, metric)
    return divergence_rule(said, favours(cmp, metric, said, expected), names, (la, lb), (na, nb))


def paper_effect(g: Group, a: str, b: str, loss: bool = False) -> float | None:
    """The paper's a − b for this group: Table 1 (and 7) means, or for the loss its Table 3 trainable +
    PE cell (Multi30k GloVe only); None where the paper prints no such pair."""
    if loss:
        t3 = paper.TABLE3 if (g.task, g.paper_source) == ("multi30k", "GloVe") else {}
        pa, pb = t3.get((a, True, True)), t3.get((b, True, True))
        return None if pa is None or pb is None else round(pa[0] - pb[0], 4)
    t1 = paper.TABLE1.get((g.task, g.paper_source), {})
    return None if a not in t1 or b not in t1 else round(t1[a][0] - t1[b][0], 4)


def _disagree(v1: str, v2: str) -> bool:
    """The two metrics point to opposite conclusions (one reproduces where the other contradicts)."""
    pos = ("reproduces",)
    neg = ("contradicts", "does not reproduce")
    return (v1.startswith(pos) and v2.startswith(neg)) or (v1.startswith(neg) and v2.startswith(pos))


ON_PAR_RULE = ("An interval across 0 speaks for a side as well: *on par* for the claim's side (it is no worse), "
               "*does not reproduce* for the other (the claim's side is not better); either reads inconclusive "
               "when the side it speaks for lost seeds.")


def findings_section(rep: ReproductionData) -> Section:
    s = Section("The paper's three findings: do they reproduce here?")
    # the first translation and the first classification group that has runs, else the first of each
    # (whose claims then say they are not run): the paper preset lists SST-2 before MNLI
    ran = [g for g in rep.inputs.groups if any(t.task == g.task for t in rep.data[g.experiment][0])]
    tr, cl = (next((g for g in [*ran, *rep.inputs.groups] if (g.task == "multi30k") == translation), None)
              for translation in (True, False))

    def name(g, role):
        return ROLE_TEXT[role].format(p=g.source)

    out: list[dict] = []

    def check(f, claim, g, a, b, expected, tolerate=False):
        m, mname, scale = rep.metric(g.task)
        c = paired(_by_seed(rep, g, a, m, scale), _by_seed(rep, g, b, m, scale))
        eff = paper_effect(g, a, b)
        v = verdict(c, expected, tolerate, eff)
        lc = paired(_by_seed(rep, g, a, rep.loss(g.task)), _by_seed(rep, g, b, rep.loss(g.task)))
        leff = paper_effect(g, a, b, loss=True)
        lv = verdict(lc, -expected, tolerate, leff)   # lower loss is better
        names = (name(g, a), name(g, b))
        q = _qualified(rep, g, a, b, m, c, v, names, expected)   # a side that lost seeds to divergence is not favoured
        lq = _qualified(rep, g, a, b, rep.loss(g.task), lc, lv, names, expected)
        gap = budget_gap(rep, g)

        def per_seed(metric, scale=1.0):   # the values the interval is computed from, per side (review M6)
            return {side: rep.per_seed(rep.main_trials(g, role), metric, scale) for side, role in (("a", a), ("b", b))}
        out.append({"finding": f, "claim": f"{claim} ({g.task})", "task": g.task, "a": name(g, a),
                    "b": name(g, b), "metric": mname, **c, "paper_effect": eff, **q,
                    "per_seed": per_seed(m, scale),
                    "loss": {**lc, "paper_effect": leff, **lq, "per_seed": per_seed(rep.loss(g.task))},
                    "disagree": _disagree(q["verdict"], lq["verdict"]),
                    **({"budget": gap, "verdict": NOT_COMPARABLE, "measured": q["verdict"]} if gap else {})})
    if tr:
        check("1", f"raw {tr.source} does worse than Xavier", tr, "P", "Xavier", -1)
        check("1", f"standardizing {tr.source} to Xavier's σ helps", tr, "P_Xavier", "P", +1)
    if cl:
        check("1", f"{cl.source}, with a σ close to Xavier's, does on par or better than Xavier", cl, "P",
              "Xavier", +1, tolerate=True)
        check("1", f"standardizing {cl.source} is neutral or worse", cl, "P_Xavier", "P", -1, tolerate=True)
    for g in (tr, cl):
        if g:
            for role in ("P_Shuffled", "P_ShuffledElements"):
                check("3", f"shuffling {g.source} ({SHUFFLE_TEXT[role]}; same values, no semantics) hurts", g,
                      role, "P", -1)
            if g is tr:   # the paper: "GloVe_Xavier ... small, but noticeable performance gains" (section 5)
                check("3", f"{name(g, 'P_Xavier')} gains over Xavier", g, "P_Xavier", "Xavier", +1)
            else:         # a source close to Xavier's σ: standardizing it is "neutral or negative" (Finding 1)
                check("3", f"{name(g, 'P_Xavier')} does on par or better than Xavier", g, "P_Xavier", "Xavier",
                      +1, tolerate=True)
    _adjust_for_multiplicity(out)
    s.lines += _findings_legend()
    for f in ("1", "2", "3"):
        lines = [_finding_line(x) for x in out if x["finding"] == f and x["n"] != (0, 0)]
        if f == "2":
            lines += _finding2(rep, tr, out)
        if lines:   # no heading without a claim under it
            s.lines += [f"**Finding {f}.**", *lines, ""]
    if any(any(x.get("diverged") or ()) or any(x.get("loss", {}).get("diverged") or ()) for x in out):
        s.lines += [DIVERGENCE_RULE + " " + ON_PAR_RULE, ""]
    rep.exports["findings"] = out
    return s


DECISIVE = ("reproduces", "contradicts")   # verdicts whose interval excludes 0: what Holm's adjustment can undo


def _adjust_for_multiplicity(out: list[dict]) -> None:
    """Holm's adjustment (`report.baseline.adjust`) of each comparison's p over its family: the claims'
    comparisons with the same b (the baseline: Xavier, or the raw source) on the same task and metric, as
    the report's family is its comparisons with one baseline on one task and metric. The task metric's and
    the loss's comparisons are separate families; a `reproduces` or `contradicts` whose adjusted p is not
    below 0.05 gets `holds_after_holm` False."""
    families: dict[tuple, list[dict]] = {}
    for x in out:
        if "b" in x:
            families.setdefault((x["task"], x["b"], x["metric"]), []).append(x)
            families.setdefault((x["task"], x["b"], "best/val/loss"), []).append(x["loss"])
    for family in families.values():
        adjust(family, DECISIVE)


def _findings_legend() -> list[str]:
    return ["Each claim is checked on the task's metric (BLEU points or accuracy points) and on the best "
            "validation loss, as a − b with a 95% interval. Seeds are paired across inits (the same seed: "
            "the same data order, non-embedding weights and dropout masks; embinit/train/trial.py derives "
            "them from the seed alone), so the interval is the **paired t** interval on the per-seed "
            "differences of the seeds both inits ran; **Welch**'s interval only where they share no seed. "
            "Verdicts: *reproduces* — the interval lies on the paper's side of 0; *contradicts* — on the "
            "other side; *inconclusive* — it includes 0 and its half-width (the ± of the interval) is larger "
            "than the difference the paper reports (Tables 1, 3 and 7), or the paper reports none, so it could "
            "not have told that difference from 0; or, for a directional claim, it holds both 0 and the "
            "paper's difference; *on par* (for the paper's \"on par or better\" claims) — it includes 0 and "
            "its half-width is at most the paper's difference; *does not reproduce* (for a directional claim) "
            "— the same, and it excludes the paper's difference; *not comparable at this budget* — the group "
            "trained for fewer epochs or with a smaller model than the paper (the reason follows), so its "
            "interval is shown but not read as a test of the paper's claim. Without an interval (one shared "
            "seed, or the same paired difference on every seed) only the sign of a − b is read, and why: "
            "*same direction* — on the paper's side of 0; *opposite direction* — on the other side; *no "
            "difference* — a − b is 0. A claim whose two metrics reach "
            "opposite verdicts is marked "
            "**BLEU and loss disagree** (or accuracy and loss). p: the test's two-sided p-value (below 0.05 exactly "
            "where the interval excludes 0), with Holm's adjustment over the m comparisons with the same b on the "
            "same task and metric (b is the baseline: Xavier, or the raw source; the report adjusts its "
            "comparisons with one baseline on one task and metric the same way). A *reproduces* or *contradicts* "
            "whose adjusted p is not below 0.05 is marked *not after Holm*: among m comparisons at 95%, one "
            "interval that excludes 0 by chance is more likely than 1 in 20, so treat that verdict as tentative.",
            ""]


def _finding_line(x: dict) -> str:
    lc = x["loss"]
    eff = "—" if x["paper_effect"] is None else fmt(x["paper_effect"])
    leff = "—" if lc["paper_effect"] is None else fmt(lc["paper_effect"], 3)
    note, lnote = (f" ({y['note']})" if y.get("note") else "" for y in (x, lc))
    if x.get("budget"):   # the interval is reported, but not read as the paper's claim
        return (f"- {x['claim']}: **{NOT_COMPARABLE}** ({x['budget']}). Measured here, {x['metric']}: "
                f"{compare_text(x['a'], x['b'], x)}{p_holm_text(x)}{note}; paper {eff}; best validation loss: "
                f"{compare_text(x['a'], x['b'], lc, 3)}{p_holm_text(lc)}{lnote}; paper {leff}.")
    line = (f"- {x['claim']}: {x['metric']} **{x['verdict']}**{holm_mark(x)}{note}. "
            f"{compare_text(x['a'], x['b'], x)}{p_holm_text(x)}; paper {eff}. Best validation loss **{lc['verdict']}**"
            f"{holm_mark(lc)}{lnote}. {compare_text(x['a'], x['b'], lc, 3)}{p_holm_text(lc)}; paper {leff}.")
    if x["disagree"]:
        line += f" **{'BLEU' if 'BLEU' in x['metric'] else 'Accuracy'} and loss disagree.**"
    return line


def _finding2(rep: ReproductionData, tr: Group | None, out: list) -> list[str]:
    lines = []
    if tr:
        absorb = {role: rep.values(rep.main_trials(tr, role), "init/emb/absorption")
                  for role in ("Xavier", "P", "P_Xavier")}
        if all(absorb.values()):
            a = {r: statistics.fmean(v) for r, v in absorb.items()}
            lines.append(f"- (a) absorption: σ(scaled table)/σ(PE) is {a['P']:.2f} for {tr.source}, "
                         f"{a['Xavier']:.3f} for Xavier and {a['P_Xavier']:.3f} for {tr.source}_Xavier "
                         f"(Table 2 above). Above 1 the token signal dominates the sum.")
            out.append({"finding": "2", "claim": "absorption ratio", "values": a})
        gains = {}
        for role in ("Xavier", "P", "P_Xavier"):
            def cell_vals(cell, role=role):   # one run per seed, as Table 3 counts them
                return {t.config.get("seed"): t.metrics["test/bleu"] for t in rep.main_trials(tr, role, cell)
                        if "test/bleu" in t.metrics}
            on, off = cell_vals((True, True)), cell_vals((True, False))
            if on and off:
                gains[role] = paired(on, off)
        if len(gains) == 3:
            d = {r: c["diff"] for r, c in gains.items()}
            smaller = d["P"] < min(d["Xavier"], d["P_Xavier"])
            verdict = "the smallest, as the paper says" if smaller else "not the smallest, unlike the paper"
            gap = budget_gap(rep, tr)
            if gap:
                verdict += f"; {NOT_COMPARABLE}: {gap}"
            lines.append(f"- (a) Table 3: switching position encoding on (trainable embeddings) gains "
                         f"{compare_text('on', 'off', gains['Xavier'])} BLEU for Xavier, "
                         f"{compare_text('on', 'off', gains['P'])} for {tr.source}, "
                         f"{compare_text('on', 'off', gains['P_Xavier'])} for {tr.source}_Xavier: the mean gain "
                         f"for raw {tr.source} is **{verdict}** (paper: +2.2 for GloVe, +7.7 for Xavier, +7.5 for "
                         "GloVe_Xavier).")
            out.append({"finding": "2", "claim": "PE gain smallest for raw P (Table 3)", "values": d,
                        "intervals": gains, "verdict": "reproduces" if smaller else "does not reproduce",
                        **({"budget": gap, "verdict": NOT_COMPARABLE} if gap else {})})
    t4 = {r["slug"]: r for r in table4_rows(rep.analogy_results)}
    if {"raw", "standardize", "standardize.pe", "pe"} <= set(t4):
        raw, std, stdpe, pe = (t4[k]["mean"] for k in ("raw", "standardize", "standardize.pe", "pe"))
        lines.append(f"- (b) Table 4: standardized vectors answer {std:.1f}% of the analogies; after adding "
                     f"position encodings {stdpe:.1f}% (paper: 12.9%): the encodings "
                     f"**{'destroy' if stdpe < std / 2 else 'do not destroy'}** the word-word relations of "
                     f"standardized vectors. Raw vectors + PE (unscaled, as the paper's row is labelled): {pe:.1f}% "
                     f"against {raw:.1f}% raw (paper: 87.3%).")
        sp = t4.get("scale.pe")
        if sp:
            lines.append(f"  What the transformer actually adds (√D-scaled vectors + PE) keeps {sp['mean']:.1f}%. "
                         "The paper's row is ambiguous: its label says unscaled, but its text explains the "
                         "result by the scaled σ (6.39 against PE's 0.67); unscaled 300d GloVe's σ (~0.37) is "
                         "below PE's, so read the paper's 87.3% beside both.")
    return lines
