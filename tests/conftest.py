"""Shared test set-up."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test reads the user's data folders or writes into the user's cache (~/.cache/embinit)."""
    for var in ("EMBINIT_DATA_DIR", "EMBINIT_GPT2_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "default-cache"))
