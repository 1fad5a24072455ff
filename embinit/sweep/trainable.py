"""The Ray Tune trainable: one Tune trial runs one embinit trial (an Optuna point: its seeds in turn).

Inside the worker, per embinit trial: skip it if MLflow already has a finished run of its key (a
concurrent or earlier sweep did it); open its MLflow child run (the same run again after a restart);
run `run_trial` with a callback that logs each epoch to MLflow and reports it to Tune with the trial's
`out_dir` (holding `last.pt`) as the checkpoint. When the worker dies, Tune restarts the trial from the
last reported checkpoint: it is restored into `out_dir` and `run_trial(resume=True)` continues from its
last epoch, logging into the same MLflow run. With the spec's `analyses`, the probe and similarity
callbacks (embinit.sweep.analyses) log into the trial's run as well.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

from embinit import tracking
from embinit.errors import EmbinitError
from embinit.sweep import analyses

RUN_ID_FILE = "mlflow_run_id"
INIT_SAMPLE = "init_embedding_sample.npy"
DEVICE_TAG = "embinit.device"


class TrialReporter:
    """Trainer callback: per-epoch metrics to MLflow, then `tune.report` with a checkpoint."""

    def __init__(self, run: tracking.TrialRun, ckpt_root: Path, selection: str):
        self.run, self.ckpt_root, self.selection = run, ckpt_root, selection

    def on_train_start(self, ctx) -> None:
        tracking.retry(lambda: self.run.client.set_tag(self.run.run_id, DEVICE_TAG, device_name(ctx.model)))
        if ctx.step == 0 and ctx.out_dir is not None:  # a fresh start, not a resumed attempt
            _save_init_sample(ctx.model, Path(ctx.out_dir) / INIT_SAMPLE)

    def on_epoch_end(self, ctx, epoch: int, metrics: dict[str, Any]) -> None:
        from ray import tune  # noqa: PLC0415
        from ray.tune import Checkpoint  # noqa: PLC0415
        self.run.log_epoch(epoch, metrics)
        numbers = {k: v for k, v in tracking.flat_numbers(metrics).items() if math.isfinite(v)}
        # `objective` (the selection metric this epoch) is what an Optuna search sees while it runs.
        objective = numbers.get(self.selection, math.nan)
        tune.report({**numbers, "objective": objective, "embinit_epoch": epoch},
                    checkpoint=Checkpoint.from_directory(str(self.ckpt_root)))


def device_name(model) -> str:
    """Where the trial trains, e.g. `cuda:0 (NVIDIA H100 80GB HBM3)` or `cpu`."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return str(device)
    import torch  # noqa: PLC0415
    return f"{device} ({torch.cuda.get_device_name(device)})"


def _save_init_sample(model, path: Path) -> None:
    """Up to 200k values of the initial (target / only) embedding table, for the histogram plot."""
    import numpy as np  # noqa: PLC0415
    tables = model.embeddings()
    weight = tables.get("tgt", tables.get("tok", next(iter(tables.values())))).weight.detach().float()
    flat = weight.flatten()
    step = max(1, flat.numel() // 200_000)
    np.save(path, {"values": flat[::step].cpu().numpy(), "shape": tuple(weight.shape)}, allow_pickle=True)


def train_unit(config: dict[str, Any], shared: dict[str, Any], units: list[dict[str, Any]],
               extra_callbacks: Callable | None = None) -> None:
    """Tune function trainable. `config["unit"]` picks the unit; Optuna's searched values are the
    other keys of `config` and override the unit's configs."""
    from ray import tune  # noqa: PLC0415
    from embinit.config import TrialConfig  # noqa: PLC0415
    unit = units[config["unit"]]
    overrides = {k: config[k] for k in shared["search_keys"] if k in config}
    root = Path(tempfile.mkdtemp(prefix="embinit-trial-"))
    restored = tune.get_checkpoint()
    if restored is not None:
        restored.to_directory(str(root))
    objectives: list[float] = []
    try:
        for item in unit["trials"]:
            cfg = TrialConfig.from_dict({**item["config"], **overrides})
            item = {**item, "group": {**item["group"], "point": overrides or item["group"]["point"],
                                      "selection": item["selection"]}}
            value = _run_one(cfg, item, shared, root, extra_callbacks)
            if value is not None:
                objectives.append(value)
        final = {"objective": _mean(objectives), "embinit_done": 1,
                 "embinit_failed": len(unit["trials"]) - len(objectives)}
        tune.report(final)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_one(cfg, item, shared, root: Path, extra_callbacks) -> float | None:
    """Run (or reuse) one embinit trial; returns its selection value, None when it failed."""
    from embinit.train import run_trial  # noqa: PLC0415 (torch; only workers import it)
    uri, exp_id, key = shared["tracking_uri"], shared["experiment_id"], cfg.key()
    metric, _mode = item["selection"]
    done = tracking.finished_run(exp_id, uri, key)
    if done is not None:  # another sweep finished it meanwhile: reuse, never train twice
        return done.data.metrics.get(f"best/{metric}", math.nan)
    out_dir = root / key
    out_dir.mkdir(parents=True, exist_ok=True)
    id_file = out_dir / RUN_ID_FILE
    run = tracking.TrialRun.open(uri, exp_id, shared["parent_run_id"], cfg.to_dict(), key, item["label"],
                                 item["group"], run_id=id_file.read_text().strip() if id_file.exists() else None)
    id_file.write_text(run.run_id)
    callbacks = [TrialReporter(run, root, metric)]
    analysis_cbs = analyses.trial_callbacks(shared.get("analyses"), cfg, run.log_metrics, out_dir)
    callbacks += analysis_cbs
    if extra_callbacks is not None:
        callbacks += list(extra_callbacks(cfg))
    try:
        result = run_trial(cfg, out_dir=out_dir, callbacks=callbacks, resume=True,
                           cache_dir=shared.get("cache_dir"))
    except EmbinitError as e:  # a user error fails the same way on every retry: record it, go on
        run.fail(f"{type(e).__name__}: {e}")
        return None
    except Exception:
        run.fail(traceback.format_exc())
        raise  # Tune retries the trial (FailureConfig) from its last checkpoint
    res = result.to_dict()
    files = _artifacts(res, out_dir, shared, item["label"])
    if shared.get("log_plots", True):
        files += analyses.plot_artifacts(analysis_cbs, res["history"], out_dir, item["label"])
    run.finish(res, files)
    shutil.rmtree(out_dir, ignore_errors=True)  # recorded: later checkpoints of the unit need not carry it
    value = (res.get("best") or {}).get(metric)
    return math.nan if value is None else value  # a diverged trial is a result, not a failure


def _artifacts(res: dict, out_dir: Path, shared: dict, label: str) -> list[tuple[str, str]]:
    """(artifact dir, local file): the best checkpoint (optional) and the two plots."""
    out: list[tuple[str, str]] = []
    best = out_dir / "best.pt"
    if shared.get("log_checkpoint", True) and best.exists():
        out.append(("checkpoint", str(best)))
    if shared.get("log_plots", True):
        from embinit.sweep import plots  # noqa: PLC0415
        curve = plots.validation_curve(res["history"], out_dir / "val_curve.png", label)
        if curve:
            out.append(("plots", str(curve)))
        sample = out_dir / INIT_SAMPLE
        if sample.exists():
            import numpy as np  # noqa: PLC0415
            data = np.load(sample, allow_pickle=True).item()
            hist = plots.init_histogram(data["values"], data["shape"], out_dir / "init_histogram.png", label)
            out.append(("plots", str(hist)))
    return out


def _mean(values: list[float]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan
