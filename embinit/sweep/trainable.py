"""The Ray Tune trainable: one Tune trial runs one embinit trial (an Optuna point: its seeds in turn).

Inside the worker, per embinit trial: claim its key and its checkpoint folder (embinit.sweep.resume;
waiting while another sweep trains the key); skip it if MLflow already has a finished run of the key (a
concurrent or earlier sweep did it); open its MLflow child run (the run its folder names when an earlier
attempt or sweep left one to continue); run `run_trial` in the folder with a callback that logs each
epoch to MLflow and reports it to Tune with the folder as the checkpoint. When the worker dies, Tune
restarts the trial from the last reported checkpoint; when the whole sweep died (the local Ray, the API),
running the spec again finds the folder. Either way `run_trial(resume=True)` continues after the last
epoch, logging into the same MLflow run. With the spec's `analyses`, the probe and similarity callbacks
(embinit.sweep.analyses) log into the trial's run as well.
"""

from __future__ import annotations

import math
import traceback
from pathlib import Path
from typing import Any, Callable

from embinit import tracking
from embinit.errors import EmbinitError
from embinit.sweep import analyses, resume
from embinit.sweep.resume import RUN_ID_FILE  # noqa: F401 (the name other modules import from here)
INIT_SAMPLE = "init_embedding_sample.npy"
DEVICE_TAG = "embinit.device"


class TrialReporter:
    """Trainer callback: per-epoch metrics to MLflow, then `tune.report` with a checkpoint."""

    def __init__(self, run: tracking.TrialRun, claim: resume.Claim, selection: str, mode: str = "max"):
        self.run, self.claim, self.selection, self.mode = run, claim, selection, mode
        self.best = math.nan  # best-so-far of the selection metric, for the terminal's progress table

    def on_train_start(self, ctx) -> None:
        tracking.retry(lambda: self.run.client.set_tag(self.run.run_id, DEVICE_TAG, device_name(ctx.model)))
        if ctx.step == 0 and ctx.out_dir is not None:  # a fresh start, not a resumed attempt
            _save_init_sample(ctx.model, Path(ctx.out_dir) / INIT_SAMPLE)

    def on_epoch_end(self, ctx, epoch: int, metrics: dict[str, Any]) -> None:
        from ray import tune
        from ray.tune import Checkpoint
        self.run.log_epoch(epoch, metrics, checkpoint=self.claim.persistent)
        numbers = {k: v for k, v in tracking.flat_numbers(metrics).items() if math.isfinite(v)}
        # `objective` (the selection metric this epoch) is what an Optuna search sees while it runs.
        objective = numbers.get(self.selection, math.nan)
        if math.isfinite(objective) and not (math.isfinite(self.best) and (
                objective <= self.best if self.mode == "max" else objective >= self.best)):
            self.best = objective
        with resume.staged([self.claim]) as folder:
            tune.report({**numbers, "objective": objective, "embinit_epoch": epoch, "embinit_best": self.best,
                         "embinit_epochs": getattr(ctx.cfg, "epochs", None) or math.nan},
                        checkpoint=Checkpoint.from_directory(folder))


def device_name(model) -> str:
    """Where the trial trains, e.g. `cuda:0 (NVIDIA H100 80GB HBM3)` or `cpu`."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return str(device)
    import torch
    return f"{device} ({torch.cuda.get_device_name(device)})"


def _save_init_sample(model, path: Path) -> None:
    """Up to 200k values of the initial (target / only) embedding table, for the histogram plot."""
    import numpy as np
    tables = model.embeddings()
    weight = tables.get("tgt", tables.get("tok", next(iter(tables.values())))).weight.detach().float()
    flat = weight.flatten()
    step = max(1, flat.numel() // 200_000)
    np.save(path, {"values": flat[::step].cpu().numpy(), "shape": tuple(weight.shape)}, allow_pickle=True)


def train_unit(config: dict[str, Any], shared: dict[str, Any], units: list[dict[str, Any]],
               extra_callbacks: Callable | None = None) -> None:
    """Tune function trainable. `config["unit"]` picks the unit; Optuna's searched values are the
    other keys of `config` and override the unit's configs."""
    from ray import tune
    from embinit.config import TrialConfig
    unit = units[config["unit"]]
    overrides = {k: config[k] for k in shared["search_keys"] if k in config}
    objectives: list[float] = []
    with resume.restored_checkpoint() as restored:
        if unit.get("fused"):  # one fused model for the group (embinit.sweep.fused)
            from embinit.sweep.fused import run_group
            objectives = run_group(unit["trials"], shared, restored, extra_callbacks)
        for item in unit["trials"] if not unit.get("fused") else ():
            cfg = TrialConfig.from_dict({**item["config"], **overrides})
            item = {**item, "group": {**item["group"], "point": overrides or item["group"]["point"],
                                      "selection": item["selection"]}}
            with resume.claim(shared, cfg.key(), restored) as claim:
                value = _run_one(cfg, item, shared, claim, extra_callbacks)
            if value is not None:
                objectives.append(value)
    final = {"objective": _mean(objectives), "embinit_done": 1, "embinit_trials": len(unit["trials"]),
             "embinit_failed": len(unit["trials"]) - len(objectives)}
    tune.report(final)


def reused_value(shared: dict[str, Any], claim: resume.Claim, metric: str) -> float | None:
    """The selection value of the key's finished run when it has one (another sweep finished it
    meanwhile, or while this one waited for the claim): reuse it, never train twice."""
    done = tracking.finished_run(shared["experiment_id"], shared["tracking_uri"], claim.key)
    if done is None:
        return None
    claim.discard()  # a leftover folder of a key that has its result
    return done.data.metrics.get(f"best/{metric}", math.nan)


def _run_one(cfg, item, shared, claim: resume.Claim, extra_callbacks) -> float | None:
    """Run (or reuse) one embinit trial in its claimed folder; returns its selection value, None when
    it failed."""
    from embinit.train import run_trial  # torch; only workers import it
    metric, mode = item["selection"]
    done = reused_value(shared, claim, metric)
    if done is not None:
        return done
    out_dir = claim.path
    run = resume.open_run(claim, shared, cfg.to_dict(), item["label"], item["group"])
    callbacks = [TrialReporter(run, claim, metric, mode or "max")]
    analysis_cbs = analyses.trial_callbacks(shared.get("analyses"), cfg, run.log_metrics, out_dir)
    callbacks += analysis_cbs
    if extra_callbacks is not None:
        callbacks += list(extra_callbacks(cfg))
    try:
        result = run_trial(cfg, out_dir=out_dir, callbacks=callbacks, resume=True,
                           cache_dir=shared.get("cache_dir"))
    except EmbinitError as e:  # a user error fails the same way on every retry: record it, go on
        claim.discard()
        run.fail(f"{type(e).__name__}: {e}", checkpoint=False)
        return None
    except Exception:
        run.fail(traceback.format_exc())
        raise  # Tune retries the trial (FailureConfig) from its last checkpoint
    res = result.to_dict()
    files = _artifacts(res, out_dir, shared, item["label"])
    if shared.get("log_plots", True):
        files += analyses.plot_artifacts(analysis_cbs, res["history"], out_dir, item["label"])
    run.finish(res, files)
    claim.discard()  # recorded: nothing left to resume
    value = (res.get("best") or {}).get(metric)
    return math.nan if value is None else value  # a diverged trial is a result, not a failure


def _artifacts(res: dict, out_dir: Path, shared: dict, label: str) -> list[tuple[str, str]]:
    """(artifact dir, local file): the best checkpoint (optional) and the two plots."""
    out: list[tuple[str, str]] = []
    best = out_dir / "best.pt"
    if shared.get("log_checkpoint", True) and best.exists():
        out.append(("checkpoint", str(best)))
    if shared.get("log_plots", True):
        from embinit.sweep import plots
        curve = plots.validation_curve(res["history"], out_dir / "val_curve.png", label)
        if curve:
            out.append(("plots", str(curve)))
        sample = out_dir / INIT_SAMPLE
        if sample.exists():
            import numpy as np
            data = np.load(sample, allow_pickle=True).item()
            hist = plots.init_histogram(data["values"], data["shape"], out_dir / "init_histogram.png", label)
            out.append(("plots", str(hist)))
    return out


def _mean(values: list[float]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan
