"""Shared test set-up."""

import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test reads the user's data folders or writes into the user's cache (~/.cache/embinit) or the
    operator's object store (a test that wants one sets its own: tests/helpers/s3.py)."""
    for var in ("EMBINIT_DATA_DIR", "EMBINIT_GPT2_DIR", "EMBINIT_STORAGE_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "default-cache"))


@pytest.fixture(scope="module")
def endpoint():
    """A real S3 server (moto's, in a thread) for the test module that asks for it: the object store's
    endpoint URL (tests/helpers/s3.py: `use_store` points the process at a fresh bucket of it)."""
    from helpers.s3 import s3_server
    with s3_server() as url:
        yield url


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


@pytest.fixture
def terminal_signals():
    """SIGINT, SIGHUP and SIGTERM as a terminal's command gets them, for the tests of what `embinit run` does
    on them: a suite started under `nohup`, in the background of a script (`make test &`: SIGINT ignored)
    or by a CI runner that ignores them has them ignored, which every process it starts inherits, and
    `embinit run` rightly keeps an ignored one ignored."""
    import signal
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)}
    for sig, handler in before.items():
        if handler is signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


# In parallel (`make test` runs `pytest -n 3 --dist loadfile --no-loadscope-reorder`): each test file
# runs on one worker, so a module-scoped fixture (a local Ray, a server, a trained model) is made once, and
# its tests keep their order; files run beside each other. (xdist's `loadgroup` marks would be finer, but
# pytest 9.2 ignores the node ids they rewrite: pytest-xdist issue 1386.) Files that use one machine-wide
# resource share a scope below, so they run one after the other on one worker. Serial runs (`-n0`) are
# untouched.
_ONE_WORKER = {
    # a `ray start` head on 127.0.0.2: both heads would want that address's default ports (52365, 10001)
    "test_service_cluster.py": "ray-head-127.0.0.2", "test_service_cluster_auth.py": "ray-head-127.0.0.2",
}
# The files whose tests take longest are handed out first, then the other files with a `slow` test, so
# the run does not end waiting on one long file.
_START_FIRST = ("test_cluster_netns.py", "test_service_concurrency.py", "test_service_cluster.py",
                "test_sweep_resume.py", "test_bench_gpu.py")


@pytest.hookimpl(optionalhook=True)   # a pytest without xdist (the GPU machine's) runs the tests all the same
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class OneWorkerPerResource(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return _ONE_WORKER.get(path.rsplit("/", 1)[-1], path)
    return OneWorkerPerResource(config, log)


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):   # only a worker's order, which `--no-loadscope-reorder` keeps
        return
    slow = {item.path.name for item in items if item.get_closest_marker("slow")}

    def rank(item) -> int:
        name = item.path.name
        return _START_FIRST.index(name) if name in _START_FIRST else len(_START_FIRST) + (name not in slow)
    items.sort(key=rank)   # stable: each file's tests keep their order


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


@pytest.fixture
def version_of_the_pins(monkeypatch):
    """Trial keys pinned by tests as computed before a field existed were computed under CODE_VERSION 2; a
    version bump changes every key alike, which is not what those tests check (that a field added later
    leaves earlier keys as they were), so they compute keys under that version."""
    import embinit.config
    monkeypatch.setattr(embinit.config, "CODE_VERSION", "2")
