"""Shared test set-up."""

import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test reads the user's data folders or writes into the user's cache (~/.cache/embinit)."""
    for var in ("EMBINIT_DATA_DIR", "EMBINIT_GPT2_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "default-cache"))


@pytest.fixture(scope="module")
def ray_local():
    """A local two-CPU Ray for one test module (the sweep tests), shut down after it."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
