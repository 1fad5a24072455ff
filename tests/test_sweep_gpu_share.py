"""Trials sharing a GPU: `resources: {gpus: 0.25}` puts 4 trials on one GPU at once, each MLflow run
records the device it trained on, and a sweep without MPS says so once, with the fix.

On CPU the GPU is a logical one (`ray.init(num_gpus=1)`): Ray's placement is what is checked, the
trials train on the CPU. With CUDA (tests/test_gpu.py runs the same sweep) they train on the GPU.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import pytest
import ray.cloudpickle

from embinit import tracking
from embinit.spec import load_spec
from embinit.sweep import run_sweep
from embinit.sweep.gpu_share import FIX, mps_running, sharing_warning
from embinit.records import DEVICE_TAG

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

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
    exp = tracking.experiment_id("share", result.tracking_uri)
    runs = [r for r in tracking.search_runs(exp, result.tracking_uri) if tracking.KEY_TAG in r.data.tags]
    met = [p.read_text() == "True" for p in spans.iterdir() if p.name.startswith("met-")]
    return runs, met


@pytest.mark.slow
def test_four_trials_share_one_logical_gpu_at_once(tmp_path):
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        runs, met = share_sweep(tmp_path, "cpu")
    finally:
        ray.shutdown()
    assert len(runs) == 4 and {r.data.tags[DEVICE_TAG] for r in runs} == {"cpu"}
    assert met == [True] * 4     # all 4 were training at the same time on the one GPU


def test_mps_is_found_by_its_control_pipe(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert not mps_running()
    (tmp_path / "control").touch()
    assert mps_running() and not mps_running(str(tmp_path / "elsewhere"))


def test_sharing_without_mps_warns_with_the_fix():
    message = sharing_warning(0.25, mps=False)
    assert "4 trials share each GPU" in message and "nvidia-cuda-mps-control -d" in message and FIX in message
    assert sharing_warning(0.25, mps=True) is None
    assert sharing_warning(1.0, mps=False) is None and sharing_warning(0.0, mps=False) is None


@pytest.mark.slow
def test_sweep_warns_once_on_a_gpu_node_without_mps(tmp_path, monkeypatch, caplog):
    """The check runs once per sweep, as a Ray task on a (logical) GPU node."""
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-mps"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    import ray

    from embinit.sweep.gpu_share import check_on_ray
    ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with caplog.at_level(logging.WARNING, logger="embinit.sweep"):
            assert "MPS daemon is not running" in check_on_ray(0.25)
            assert check_on_ray(1.0) is None
        (tmp_path / "no-mps").mkdir()
        (tmp_path / "no-mps" / "control").touch()
        assert check_on_ray(0.25) is None                 # the daemon's pipe is there: no warning
    finally:
        ray.shutdown()
    assert len([r for r in caplog.records if "MPS" in r.getMessage()]) == 1
