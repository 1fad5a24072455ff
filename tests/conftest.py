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
    """A local two-CPU Ray for one test module (the sweep tests), shut down after it: on the loopback, as
    the local Ray `embinit run` starts (embinit.sweep.ray_runtime), so a sweep sees one machine."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from embinit.sweep.ray_runtime import local_ray_options
    with local_ray_options() as local:
        ray.init(address="local", num_cpus=2, log_to_driver=False, **local)
    yield
    ray.shutdown()


# What `make test` skipped and why, said once at the very end (issue 22 item 12): a newcomer without
# Chromium or PostgreSQL otherwise tests less than CI without noticing. `.ci/run` installs both.
_ENABLE = {"chromium": "apt-get install -y chromium (and the playwright package: pip install playwright)",
           "playwright": "pip install playwright", "postgresql": "apt-get install -y postgresql",
           "cluster harness": "run the tests as root, as CI does (network namespaces, tmpfs mounts)",
           "gpu": "a CUDA GPU (python -m pytest -m gpu tests/test_gpu.py)"}


def skip_reasons(reports) -> dict[str, int]:
    """{reason: number of tests skipped for it}, most frequent first."""
    counts: dict[str, int] = {}
    for rep in reports:
        longrepr = rep.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@pytest.hookimpl(wrapper=True, tryfirst=True)   # the outermost wrapper: after pytest's short summary
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    result = yield
    reasons = skip_reasons(terminalreporter.stats.get("skipped", []))
    if reasons:
        _say_skips(terminalreporter, reasons)
    return result


def _say_skips(terminalreporter, reasons: dict[str, int]) -> None:
    total = sum(reasons.values())
    terminalreporter.section("what this run skipped, and why", sep="-")
    for reason, n in reasons.items():
        hint = next((how for word, how in _ENABLE.items() if word in reason.lower()), None)
        terminalreporter.write_line(f"{n:4d} skipped: {reason}" + (f"  -> to run them: {hint}" if hint else ""))
    # CI has no GPU either: only the other skips mean this run tested less than CI does.
    fewer = sum(n for reason, n in reasons.items() if "gpu" not in reason.lower())
    if fewer:
        terminalreporter.write_line(f"{fewer} test{'s' if fewer != 1 else ''} skipped: this run tested less "
                                    "than CI, which installs what they need (.ci/run).")
    else:
        terminalreporter.write_line(f"{total} skipped: GPU tests, which CI skips too (they run on a GPU machine).")
