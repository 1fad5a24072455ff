"""The reproduction's section on the KNN-similarity blog post: its experiments as embinit runs them
(tune_configs/blog/), scored as the post's code scores -- |shared neighbours| / K, `overlap` -- and by
the Jaccard index its text writes, side by side (issue 23).

The post's numbers are its code's score: experiment 1 rises to ~26% (then falls: its peak), experiment
2 reaches ~32% (its end). Each trial that compared itself with its twin (the same config at the
reference embedding seed) logged `sim/knn_<score>_mean` over training; the table shows, per score, the
value at init, the peak (and its step) and the end. Experiments not in the store are listed as such.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from embinit.config import TrialConfig, task_defaults
from embinit.errors import EmbinitError
from embinit.init.registry import parse_init_spec
from embinit.tracking import mlflow_store
from embinit.reproduction.compare import fmt
from embinit.reproduction.export import Section
from embinit.reproduction.inputs import BlogRun, load_trials
from embinit.reproduction.knn_settings import changed_text, run_settings, setting_text, settings_text
from embinit.tracking.run_readers import metric_history

if TYPE_CHECKING:
    from embinit.reproduction.data import ReproductionData

SCORES = ("overlap", "jaccard")   # the post's code's score first
SETTINGS = ("d_model", "layers", "tokenizer", "max_len", "batch_size", "lr", "dropout", "pre_ln", "epochs")
# The model the post describes, beside each run's: its text states D and the tokenizer ("an embedding
# dimension of 512 and the GPT-2 tokenizer"); the layers only its code does (configs.py: 6). A run without
# them (e.g. a small CPU check) is marked, so its score does not read as the post's setup's.
POST_MODEL = {"d_model": (512, "the post"), "layers": (6, "the post's code"), "tokenizer": ("gpt2", "the post")}
POST_KNN = (10, "dot")   # the post's code's K and neighbour score (inner product), beside its runs' where they differ


def _curve_cells(uri, run_id: str, score: str) -> dict:
    hist = metric_history(uri, run_id, f"sim/knn_{score}_mean").points
    if not hist:
        return {}
    peak = max(hist, key=lambda p: (p[1], -p[0]))
    return {"init": hist[0][1], "peak": peak[1], "peak_step": peak[0], "end": hist[-1][1], "end_step": hist[-1][0]}


def _other_axes(t) -> dict:
    """The trial's axis values but `emb_seed` (whose values are the pair the score compares)."""
    return {k: v for k, v in t.axes.items() if k != "emb_seed"}


def _post_model() -> str:
    """What the post's model was, from `POST_MODEL`, each value with where it is stated."""
    return ", ".join(f"{k} {v} ({where})" for k, (v, where) in POST_MODEL.items())


def _settings(t) -> dict:
    """The trial's `SETTINGS` as it trained: the task's defaults for those its config leaves unset, the D
    its run recorded (`model_size`) and the tokenizer `auto` stands for."""
    try:
        cfg = TrialConfig.from_dict(t.config).resolved()
        out = {k: getattr(cfg, k) for k in SETTINGS}
        out["tokenizer"] = cfg.tokenizer_for(parse_init_spec(cfg.init))
    except EmbinitError:   # a config this version cannot read: as recorded
        out = {k: t.config.get(k) for k in SETTINGS}
    out["d_model"] = t.model_size.get("d_model") or out["d_model"] or getattr(task_defaults(t.task), "d_model", None)
    return out


def _setting_text(k: str, v) -> str:
    """`k v`, with the post's value where it states another (`POST_MODEL`)."""
    post, where = POST_MODEL.get(k, (None, ""))
    return f"{k} {v}" if post is None or str(post) == str(v) else f"{k} {v} **({where}: {post})**"


def _run_lines(rep: ReproductionData, run: BlogRun, rows: list) -> list[str]:
    trials, sweeps = load_trials(run.experiment, rep.uri)
    trials = [t for t in trials if t.status in ("finished", "running")]
    have = [t for t in trials if any(f"sim/knn_{s}_mean" in t.metrics for s in SCORES)]
    lines = [f"**{run.title}** (`{run.experiment}`, {run.spec}); the post: ~{run.blog_value:.0%} ({run.blog_at}), "
             f"with {_post_model()}", ""]
    if not have:
        return lines + ["No trial of it logged a similarity yet.", ""]
    knn = list(run_settings(have, sweeps, rep.sweep_spec).values())
    post = f" **(the post's code: {setting_text(POST_KNN)})**" if any(k not in (None, POST_KNN) for k in knn) else ""
    lines[0] += f"; its runs' KNN: {settings_text(knn)}{changed_text(have)}{post}"
    lines += ["| trial | settings | score | at init | peak (step) | end (step) | the post |", "|---" * 7 + "|"]
    for t in sorted(have, key=lambda t: (sorted(_other_axes(t).items()), t.config.get("seed", 0),
                                         t.config.get("emb_seed") or 0)):
        # the spec's other axes (gpu-blog-exp1 trains untied and tied twins in one experiment)
        who = ", ".join([f"seed {t.config.get('seed')}, emb_seed {t.config.get('emb_seed', '—')}",
                         *(f"{k} {v}" for k, v in sorted(_other_axes(t).items()))])
        settings = ", ".join(_setting_text(k, v) for k, v in _settings(t).items() if v is not None)
        for score in SCORES:
            c = _curve_cells(rep.uri, t.run_id, score)
            post = f"~{run.blog_value:.2f} ({run.blog_at})" if score == "overlap" else "—"
            lines.append(f"| {who} | {settings} | {score} | {fmt(c.get('init'), 3)} | {fmt(c.get('peak'), 3)} "
                         f"({c.get('peak_step', '—')}) | {fmt(c.get('end'), 3)} ({c.get('end_step', '—')}) | {post} |")
            rows.append({"experiment": run.experiment, "run": t.run_id, "seed": t.config.get("seed"),
                         "emb_seed": t.config.get("emb_seed"), "axes": _other_axes(t), "score": score, **c,
                         "blog": run.blog_value if score == "overlap" else None, "blog_at": run.blog_at})
    return lines + [""]


def blog_section(rep: ReproductionData, runs: tuple[BlogRun, ...] | None = None) -> Section:
    """The section for `runs`, by default the preset's (`Inputs.blog_runs`: the GPU preset reads its own
    experiments, tune_configs/gpu/blog_*.yaml)."""
    s = Section("The KNN-similarity blog post: its score beside Jaccard")
    s.lines += ["KNN match similarity of two LMs that differ only in their token table's init (`emb_seed`), "
                "logged over training, with the K and neighbour measure given per experiment (as its runs recorded "
                "them; older runs: the spec of the sweep that trained them). `overlap` = |shared neighbours| / K "
                "is the score of the post's code and of its published numbers; `jaccard` = |∩| / |∪| is the formula "
                "its text writes (jaccard = I / (2K − I) ≤ overlap = I / K). The settings follow the post's "
                "repository (ryankish/DoEmbeddingsConverge, configs/configs.py); the specs say where embinit "
                "differs. Each run's settings are those it trained with; a model other than the post's (D, "
                "layers, tokenizer) is marked with the post's value: its score is not of the post's setup.", ""]
    rows: list[dict] = []
    absent = []
    for run in rep.inputs.blog_runs if runs is None else runs:
        if mlflow_store.experiment_id(run.experiment, rep.uri) is None:
            absent.append(f"`{run.experiment}`")
            continue
        s.lines += _run_lines(rep, run, rows)
    if absent:
        s.lines.append(f"Not run in this store: {', '.join(absent)} (`embinit run <spec>`).")
    rep.exports["blog"] = rows
    return s
