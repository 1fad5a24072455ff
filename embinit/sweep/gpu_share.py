"""Several trials on one GPU: CUDA MPS, and the warning a sweep prints once when it is missing.

Trials that share a GPU are separate processes. Without the CUDA MPS daemon their CUDA contexts
time-slice the GPU: one runs at a time, so N trials crawl at ~1/N of a solo trial's speed or worse (on
an H100, 15 trials without MPS did not finish 20 epochs in 575 s). Under MPS their kernels run side by
side (10 trials each kept their solo speed). MPS is a user-space daemon per GPU node:

    export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-mps-log
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d

Every trial process must see the same CUDA_MPS_PIPE_DIRECTORY (the GPU worker of docker-compose.yml
does all of this; docs/deployment.md).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"
FIX = ("start the CUDA MPS daemon on each GPU node before the trials: `export CUDA_MPS_PIPE_DIRECTORY="
       "/tmp/nvidia-mps CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-mps-log; mkdir -p $CUDA_MPS_PIPE_DIRECTORY "
       "$CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d` (docs/deployment.md, \"Many trials per GPU\")")

log = logging.getLogger("embinit.sweep")


def mps_running(pipe_dir: str | None = None) -> bool:
    """Whether an MPS control daemon listens where this process's CUDA clients would look."""
    folder = Path(pipe_dir or os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIR)
    return (folder / "control").exists()


def sharing_warning(gpus_per_trial: float, mps: bool) -> str | None:
    """The message for trials sharing a GPU without MPS; None when they do not share or MPS runs."""
    if not 0 < gpus_per_trial < 1 or mps:
        return None
    per_gpu = int(1 / gpus_per_trial + 1e-9)
    return (f"up to {per_gpu} trials share each GPU (resources.gpus: {gpus_per_trial:g}) but the CUDA MPS "
            f"daemon is not running: their CUDA contexts will time-slice the GPU and each will run far "
            f"slower than alone. Fix: {FIX}")


def check_on_ray(gpus_per_trial: float) -> str | None:
    """Check MPS once, on a GPU node of the connected Ray cluster (a task asking for the trials' GPU
    share), and log the warning there is one. Nothing when trials do not share GPUs or the cluster has
    none."""
    import ray
    if not 0 < gpus_per_trial < 1 or ray.cluster_resources().get("GPU", 0) <= 0:
        return None
    running = ray.get(ray.remote(num_cpus=0, num_gpus=gpus_per_trial)(mps_running).remote())
    message = sharing_warning(gpus_per_trial, running)
    if message:
        log.warning(message)
    return message
