"""What a worker records of a trial besides MLflow's per-epoch metrics: the Tune reports with their
checkpoint (`TrialReporter`), the file in the trial's folder holding its MLflow run id (so a restarted
attempt or a rerun logs into the same run; embinit.sweep.resume), the device it trains on, and the
artifacts (best checkpoint, validation curve, init histogram)."""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Any

from embinit.tracking import mlflow_store, trial_run
from embinit.checkpoint_files import BEST, BEST_ARTIFACT_DIR, INIT_SAMPLE, OLD_INIT_SAMPLE, OUTPUTS_ARTIFACT_DIR, \
    is_output_file, read_init_sample, write_init_sample
from embinit.errors import EmbinitError
from embinit.sweep import resume
from embinit.sweep.work import SweepContext
from embinit.task_registry import loss_metric

log = logging.getLogger("embinit.sweep")


class TrialReporter:
    """Trainer callback: per-epoch metrics to MLflow, then `tune.report`, with the trial's claimed folder
    (embinit.sweep.resume) as the checkpoint where a restarted attempt needs Tune's copy of it."""

    reports_resume = True   # a fused member's group reports its resume instead (embinit.sweep.fused)

    def __init__(self, run: trial_run.TrialRun, claim: resume.Claim, selection: str, mode: str = "max",
                 one_machine: bool = False):
        self.run, self.claim, self.selection, self.mode = run, claim, selection, mode
        self.one_machine = one_machine  # SweepContext.one_machine: whether Tune's copy is needed (resume.py)
        self.best = math.nan  # best-so-far of the selection metric, for the terminal's progress table
        self.last = math.nan  # the selection metric at the latest epoch

    def on_train_start(self, ctx) -> None:
        # `ctx.cfg` is the config the model trains with (resolved d_model, heads, precision): its params
        self.run.log_train_start(ctx.cfg, ctx.model, device_name(ctx.model))
        if ctx.step == 0 and ctx.out_dir is not None:  # a fresh start, not a resumed attempt
            _save_init_sample(ctx.model, Path(ctx.out_dir) / INIT_SAMPLE)
        if self.resumed(ctx) and self.reports_resume:
            from ray import tune
            tune.report(resumed_report(ctx.history[-1].get("epoch", len(ctx.history)), self.best, self.last,
                                       getattr(ctx.cfg, "epochs", None)))

    def resumed(self, ctx) -> bool:
        """Whether the trial resumes after an epoch (its checkpoint's `ctx.history`); if so, `best` and
        `last` become the best and the latest selection metric of the epochs it resumes after."""
        history = getattr(ctx, "history", None) or []
        for metrics in history:
            self.last = self.track({k: v for k, v in mlflow_store.flat_numbers(metrics).items() if math.isfinite(v)})
        return bool(history)

    def on_epoch_end(self, ctx, epoch: int, metrics: dict[str, Any]) -> None:
        from ray import tune
        self.claim.sync()  # the store's copy first (if one): the run's checkpoint tag then holds on any node
        self.run.log_epoch(epoch, metrics, checkpoint=self.claim.persistent)
        numbers = {k: v for k, v in mlflow_store.flat_numbers(metrics).items() if math.isfinite(v)}
        objective = self.track(numbers)
        with resume.tune_checkpoint([self.claim], self.one_machine) as checkpoint:
            tune.report({**numbers, "objective": objective, "embinit_epoch": epoch, "embinit_best": self.best,
                         "embinit_epochs": getattr(ctx.cfg, "epochs", None) or math.nan}, checkpoint=checkpoint)

    def track(self, numbers: dict[str, float]) -> float:
        """This epoch's selection metric (`objective`: what an Optuna search sees while it runs); keeps
        the best so far in `best` for the terminal's progress table."""
        objective = numbers.get(self.selection, math.nan)
        if math.isfinite(objective) and not (math.isfinite(self.best) and (
                objective <= self.best if self.mode == "max" else objective >= self.best)):
            self.best = objective
        return objective


def resumed_report(epoch: int, best: float, objective: float, epochs: int | None, **more) -> dict[str, Any]:
    """The Tune report a resumed trial (or fused group) sends at its start, so the progress table shows the
    epoch it resumes after and its best so far at once, not `-` until its next epoch ends.
    `embinit_resumed` tells embinit.sweep.progress that no epoch ended (its ETA counts none); `objective`
    (which Tune's Optuna searcher reads from every report) repeats what that epoch's report said."""
    return {"objective": objective, "embinit_epoch": epoch, "embinit_best": best,
            "embinit_epochs": epochs or math.nan, "embinit_resumed": 1, **more}


def device_name(model) -> str:
    """Where the trial trains, e.g. `cuda:0 (NVIDIA H100 80GB HBM3)` or `cpu`."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return str(device)
    import torch
    return f"{device} ({torch.cuda.get_device_name(device)})"


def _save_init_sample(model, path: Path) -> None:
    """Up to 200k values of the initial (target / only) embedding table, for the histogram plot."""
    tables = model.embeddings()
    weight = tables.get("tgt", tables.get("tok", next(iter(tables.values())))).weight.detach().float()
    flat = weight.flatten()
    step = max(1, flat.numel() // 200_000)
    write_init_sample(path, flat[::step].cpu().numpy(), tuple(weight.shape))  # plain arrays, no pickle


def artifacts(res: dict, out_dir: Path, ctx: SweepContext, title: str) -> list[tuple[str, str]]:
    """(artifact dir, local file): the best checkpoint, the per-example outputs (`outputs/`: translation's
    test hypotheses and references, a classifier's dev predictions and labels) and the two plots, each
    unless the spec's `mlflow` settings turn it off. `title`: the plots', the trial's run name (`WorkItem.run_name`:
    its label, seed and axes' values, which tell it from its siblings)."""
    out: list[tuple[str, str]] = []
    best = out_dir / BEST
    if ctx.log_checkpoint and best.exists():
        out.append((BEST_ARTIFACT_DIR, str(best)))  # the artifact checkpoint_files.BEST_ARTIFACT
    if ctx.log_outputs:
        out += [(OUTPUTS_ARTIFACT_DIR, str(f)) for f in sorted(Path(out_dir).glob("*.txt")) if is_output_file(f.name)]
    if ctx.log_plots:
        from embinit import plots
        loss = loss_metric(res.get("config", {}).get("task"))   # MNLI's is val/loss_matched
        curve = plots.validation_curve(res["history"], out_dir / "val_curve.png", title, loss)
        if curve:
            out.append(("plots", str(curve)))
        hist = _init_histogram(out_dir, title)
        if hist:
            out.append(("plots", str(hist)))
    return out


def _init_histogram(out_dir: Path, label: str) -> Path | None:
    """The init histogram from the trial folder's init sample, None without a readable one. The file
    may have come through the object store: it is read without unpickling (checkpoint_files), and one
    that cannot be read that way (an older sweep's pickled `.npy`, a damaged or foreign file) costs the
    plot, with a warning, not the trial's result."""
    from embinit import plots
    sample, old = out_dir / INIT_SAMPLE, out_dir / OLD_INIT_SAMPLE
    try:
        if sample.exists():
            values, shape = read_init_sample(sample)
        elif old.exists():
            raise EmbinitError(f"{old} is an init sample in the older pickled format, which is not loaded "
                               "(a pickle from a trial folder could run code)")
        else:
            return None
    except EmbinitError as e:
        message = f"{e}; no init histogram for {label}"
        log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return None
    return plots.init_histogram(values, shape, out_dir / "init_histogram.png", label)
