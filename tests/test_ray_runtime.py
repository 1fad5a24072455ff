"""RayRuntime.check_fits: a trial that asks for more than a Ray of this machine alone has fails at once,
with every short resource named, instead of staying pending for ever."""

import pytest
import torch

from embinit.errors import EmbinitError
from embinit.sweep.ray_runtime import RayRuntime


def started_here(monkeypatch, have):
    import ray
    monkeypatch.setattr(ray, "cluster_resources", lambda: have)
    rt = RayRuntime(None)
    rt.started = True
    return rt


def test_names_every_resource_the_local_ray_lacks(monkeypatch):
    rt = started_here(monkeypatch, {"CPU": 2.0})
    with pytest.raises(EmbinitError) as e:
        rt.check_fits(4, 0.25)
    msg = str(e.value)
    assert "resources.cpus: 4 per trial, but this machine's Ray has 2" in msg
    assert "resources.gpus: 0.25 per trial, but this machine's Ray has 0 (no CUDA device seen)" in msg
    assert "gpus: 0 and device: cpu" in msg


def test_what_fits_passes_and_a_joined_cluster_is_not_checked(monkeypatch):
    started_here(monkeypatch, {"CPU": 2.0, "GPU": 1.0}).check_fits(2, 0.25)
    started_here(monkeypatch, {"CPU": 2.0}).check_fits(0.5, 0)
    joined = RayRuntime("10.0.0.1:6379")                    # an autoscaler may still add nodes
    joined.started = True
    joined.check_fits(64, 8)
    RayRuntime(None).check_fits(64, 8)                      # a Ray its caller started: the caller's call


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_a_gpu_spec_on_a_cpu_machine_fails_before_any_trial(tmp_path):
    from embinit.spec import load_spec
    from embinit.sweep import run_sweep
    spec = load_spec({"name": "gpu-here", "tasks": [{"task": "synthetic_translation", "epochs": 1,
                                                     "max_train_examples": 50}],
                      "inits": ["xavier"], "seeds": 1, "resources": {"cpus": 1, "gpus": 0.5},
                      "cache_dir": str(tmp_path / "cache"),
                      "mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db"}})
    with pytest.raises(EmbinitError, match="resources.gpus: 0.5 per trial, but this machine's Ray has 0"):
        run_sweep(spec, progress=False)
    import ray
    assert not ray.is_initialized()           # the Ray it started is shut down again


@pytest.mark.slow   # starts a Ray
def test_without_an_address_a_ray_of_its_own_starts_whatever_cluster_the_machine_knows(monkeypatch):
    """`embinit run` without --address starts a local Ray. `ray.init()` joins a cluster it finds instead
    (RAY_ADDRESS, or one `ray start` left on this machine): the sweep then went to someone else's cluster,
    or failed with "cannot connect to the Ray cluster at None"."""
    import ray
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.9:1")         # a cluster nobody runs
    with RayRuntime(None) as rt:
        assert rt.started and ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert not ray.is_initialized()


@pytest.mark.parametrize("gcs, alive, expected", [
    ("127.0.0.1:6379", 1, True),        # embinit's local Ray: nothing off this machine can join
    ("127.0.0.2:6379", 2, False),       # two nodes (on loopback addresses, as the cluster tests run them)
    ("10.0.0.5:6379", 1, False),        # listening on the network: a node may join later
    ("[::1]:6379", 1, True),
    ("head.example:6379", 1, False),
])
def test_one_machine_only_where_no_other_node_can_take_a_retry(monkeypatch, gcs, alive, expected):
    """Whether a restarted trial must run where its node-local folder is (then Tune keeps no copy)."""
    import ray
    from types import SimpleNamespace

    from embinit.sweep.ray_runtime import one_machine
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(gcs_address=gcs))
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}] * alive + [{"Alive": False}])
    assert one_machine() is expected


def test_one_machine_without_a_ray_says_no_and_starts_none():
    """Asked before any Ray is connected (a trainable made outside a sweep), it must not start one: Ray's
    runtime context would, and every later `ray.init` of the process would then fail."""
    import ray

    from embinit.sweep.ray_runtime import one_machine
    assert not ray.is_initialized()
    assert one_machine() is False
    assert not ray.is_initialized()


def test_a_script_that_starts_a_ray_head_keeps_token_auth_on():
    """`ray start` listens on every interface whatever its node address (only the Ray embinit starts for
    itself keeps to the loopback, `local_ray_options`): a script of the repository that runs one must not
    turn Ray's token auth off (tune_configs/offline/reproduce.sh once did)."""
    import re
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    files = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True).stdout.split()
    scripts = [f for f in files if f.endswith(".sh") or Path(f).name == "Makefile"]
    starting = [f for f in scripts if re.search(r"^\s*ray start\b", (root / f).read_text(), re.M)]
    assert "tune_configs/offline/reproduce.sh" in starting
    off = [f for f in starting if re.search(r"RAY_AUTH_MODE=(\"|')?disabled", (root / f).read_text())]
    assert off == []
    assert all("RAY_AUTH_MODE=token" in (root / f).read_text() for f in starting)
