"""Trials sharing a GPU: `resources: {gpus: 0.25}` puts 4 trials on one GPU at once, each MLflow run
records the device it trained on, and a sweep without MPS says so once, with the fix.

On CPU the GPU is a logical one (`ray.init(num_gpus=1)`): Ray's placement is what is checked, the
trials train on the CPU. With CUDA (tests/test_gpu.py runs the same sweep) they train on the GPU.
"""

from __future__ import annotations

import logging

import pytest

from embinit.sweep.gpu_share import FIX, mps_running, sharing_warning
from helpers.gpu_share import four_on_one_gpu



@pytest.mark.slow
def test_four_trials_share_one_logical_gpu_at_once(tmp_path):
    devices, met = four_on_one_gpu(tmp_path, "cpu", num_cpus=1)
    assert devices == {"cpu"}
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
    ray.init(address="local", num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False)
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
