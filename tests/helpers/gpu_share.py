"""A sweep of 4 trials sharing one GPU (`resources: {gpus: 0.25}`), as the GPU-sharing tests run it
(tests/test_sweep_gpu_share.py on a logical GPU, tests/test_gpu.py on a real one)."""

from __future__ import annotations

import os
import sys
import time

import ray.cloudpickle

from embinit.tracking import mlflow_store, records
from embinit.tracking.records import DEVICE_TAG
from embinit.spec import load_spec
from embinit.sweep import run_sweep

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/helpers

TINY = {"task": "synthetic_translation", "epochs": 1, "max_train_examples": 100, "d_model": 16,
        "ff_dim": 32, "heads": 2}


class Span:
    """A barrier at the start of training: each trial marks that it started, then waits (up to 120 s)
    until all 4 have; it records whether they all met, i.e. were placed at the same time."""

    def __init__(self, folder: str, n: int = 4):
        self.folder, self.n = folder, n

    def on_train_start(self, ctx):
        open(os.path.join(self.folder, f"start-{ctx.cfg.seed}"), "w").close()
        deadline = time.time() + 120
        while time.time() < deadline and len(self._started()) < self.n:
            time.sleep(0.2)
        self.met = len(self._started()) >= self.n

    def _started(self):
        return [f for f in os.listdir(self.folder) if f.startswith("start-")]

    def on_train_end(self, ctx, result):
        with open(os.path.join(self.folder, f"met-{ctx.cfg.seed}"), "w") as f:
            f.write(str(self.met))


def share_sweep(tmp_path, device: str) -> tuple[list, list[bool]]:
    """4 trials with gpus: 0.25 on a 1-GPU Ray; returns their MLflow runs and whether each met the
    other 3 at the start barrier."""
    spans = tmp_path / "spans"
    spans.mkdir()
    spec = load_spec({"name": "share", "tasks": [TINY], "inits": ["xavier"], "seeds": 4,
                      "defaults": {"device": device}, "resources": {"cpus": 0.25, "gpus": 0.25},
                      "max_concurrent": 4, "cache_dir": str(tmp_path / "cache"),
                      "mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "log_plots": False,
                                 "log_checkpoint": False}})
    result = run_sweep(spec, progress=False, extra_callbacks=lambda cfg: [Span(str(spans))])
    assert result.n_finished == 4, result.trials
    exp = mlflow_store.experiment_id("share", result.tracking_uri)
    runs = [r for r in mlflow_store.search_runs(exp, result.tracking_uri) if records.KEY_TAG in r.data.tags]
    met = [p.read_text() == "True" for p in spans.iterdir() if p.name.startswith("met-")]
    return runs, met


def four_on_one_gpu(tmp_path, device: str, num_cpus: int) -> tuple[set[str], list[bool]]:
    """`share_sweep` on a fresh local Ray with one GPU (logical on a CPU machine): the device tags of
    the 4 runs, and whether each trial met the other 3 at the start barrier."""
    import ray
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=num_cpus, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        runs, met = share_sweep(tmp_path, device)
    finally:
        ray.shutdown()
    assert len(runs) == 4
    return {r.data.tags[DEVICE_TAG] for r in runs}, met
