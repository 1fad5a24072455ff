"""The experiment driver's lifecycle (the body of the Ray actor), with `run_sweep` replaced: the states it
reports for a sweep that succeeds, partly fails, wholly fails, raises or is cancelled, and that what it
hands the sweep survives pickling (Tune pickles its stopper and callbacks)."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

import embinit.sweep
from embinit.sweep import SweepResult
from service.driver import _DRIVERS, ExperimentDriver, _should_stop

SPEC = {"name": "drv", "tasks": ["synthetic_lm"], "inits": ["xavier"], "seeds": 4}


def _result(planned=4, reused=0, finished=4, failed=0, cancelled=False, errors=("ValueError: bad lr",)) -> SweepResult:
    trials = ([{"key": f"f{i}", "status": "finished", "error": None} for i in range(finished)]
              + [{"key": f"x{i}", "status": "failed", "error": errors[i % len(errors)]} for i in range(failed)])
    return SweepResult("drv", "1", "p", "sqlite:///x.db", planned, reused, trials, cancelled)


def _drive(monkeypatch, sweep, tracking_uri: str = "sqlite:///x.db", store_uri: str | None = None) -> ExperimentDriver:
    monkeypatch.setattr(embinit.sweep, "run_sweep", sweep)
    driver = ExperimentDriver("embinit-exp-t", SPEC, tracking_uri, ["k"] * 4, store_uri=store_uri)
    for _ in range(500):
        if driver.state.finished_at:
            return driver
        time.sleep(0.01)
    raise AssertionError("the driver did not finish")


@pytest.mark.parametrize("result, status, error", [
    (_result(), "succeeded", None),
    (_result(reused=2, finished=4), "succeeded", None),
    (_result(finished=3, failed=1), "failed",
     "only 3 of 4 trials finished (1 failed; see MLflow); failures: ValueError: bad lr (1 trial); submit "
     "again with ?rerun=true to run the rest"),
    (_result(finished=0, failed=4), "failed", "all 4 trials failed: ValueError: bad lr (4 trials)"),
    (_result(planned=1, finished=0, failed=1), "failed", "the 1 trial failed: ValueError: bad lr (1 trial)"),
    # trials reused from an earlier sweep have results: the failure is of the trials this one trained
    (_result(planned=2, reused=1, finished=1, failed=1), "failed",
     "the 1 trial it trained failed (1 more was reused from an earlier sweep): ValueError: bad lr (1 trial)"),
    (_result(planned=5, reused=2, finished=2, failed=3), "failed",
     "all 3 trials it trained failed (2 more were reused from earlier sweeps): ValueError: bad lr (3 trials)"),
    # a sweep whose trials never ran (or ran elsewhere) is not a success: finished + reused != planned
    (_result(finished=0), "failed",
     "only 0 of 4 trials finished (4 have no finished run; see MLflow); submit again with ?rerun=true "
     "to run the rest"),
    (_result(finished=2, failed=1), "failed",
     "only 2 of 4 trials finished (1 failed, 1 has no finished run; see MLflow); failures: ValueError: "
     "bad lr (1 trial); submit again with ?rerun=true to run the rest"),
    (_result(finished=1, cancelled=True), "cancelled", None),
    # a cancel that came after the last trial had finished cancelled nothing
    (_result(finished=4, cancelled=True), "succeeded", None),
])
def test_final_states(monkeypatch, result, status, error):
    driver = _drive(monkeypatch, lambda *a, **k: result)
    assert driver.state.status == status and driver.state.error == error
    assert driver.state.counts["reused"] == result.reused
    assert driver.state.counts["finished"] == result.n_finished - result.reused


def test_a_failed_experiment_names_its_trials_reasons_most_common_first(monkeypatch):
    """The reason a researcher reads in `GET /experiments/{id}` is the trials' own (the last line of each
    traceback), most common first, at most three of them; not only "see MLflow"."""
    tb = "Traceback (most recent call last):\n  File \"x.py\", line 1\nOSError: /data/de.txt: no such file\n"
    errors = (tb, tb, "EmbinitError: empty overlap", "A: 1", "B: 2", None)
    driver = _drive(monkeypatch, lambda *a, **k: _result(planned=6, finished=0, failed=6, errors=errors))
    assert driver.state.error == ("all 6 trials failed: OSError: /data/de.txt: no such file (2 trials); "
                                  "EmbinitError: empty overlap (1 trial); A: 1 (1 trial); and 2 other reasons")


def test_trials_tune_gave_up_on_before_their_run_existed_say_why(monkeypatch):
    """Seen on a lab cluster: a Ray node without the object store's AWS_ENDPOINT_URL failed two trials
    while claiming their keys, before their MLflow runs existed; the experiment said only "2 have no
    finished run; see MLflow", and MLflow had nothing. The reason Tune kept now follows."""
    result = _result(planned=6, finished=4)
    why = 'botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "https://b.s3.amazonaws.com/{}.lease"'
    result.tune_errors = [f"Pretrained-s0 [9a2fd416]: {why.format('k1')}",   # one shape: counted together
                          f"Pretrained_Xavier-s1 [3bd1b049]: {why.format('k2')}"]
    driver = _drive(monkeypatch, lambda *a, **k: result)
    assert driver.state.status == "failed"
    assert driver.state.error == ("only 4 of 6 trials finished (2 have no finished run; see MLflow); Tune gave "
                                  f"up on 2 trials: {why.format('k1')} (2 trials); submit again with ?rerun=true "
                                  "to run the rest")
    # embinit's own errors are said whole (they name their fix at the end), without their type
    ours = "the object store s3://b (EMBINIT_STORAGE_URI) cannot be reached from the Ray node w1: " + "x" * 300
    result.tune_errors = [f"Xavier-s0 [1]: embinit.errors.EmbinitError: {ours}. Every Ray node needs its endpoint"]
    driver = _drive(monkeypatch, lambda *a, **k: result)
    assert f"Tune gave up on 1 trial: {ours}. Every Ray node needs its endpoint (1 trial);" in driver.state.error


def test_a_failed_experiment_gives_its_trials_advice_in_the_services_terms(monkeypatch):
    """A trial's no-data error advises the command line's `--data-dir`; `GET /experiments/{id}` says how a
    spec sent to the service gives a task its data."""
    from embinit.tasks.hub import no_data_error
    error = f"EmbinitError: {no_data_error('sst2', {'train': 'train'}, 'no --data-dir given', 'offline')}"
    driver = _drive(monkeypatch, lambda *a, **k: _result(finished=0, failed=4, errors=(error,)))
    assert driver.state.error.startswith("all 4 trials failed: EmbinitError: sst2: no local data (no data_dir "
                                         "in the spec) and")
    assert "--data-dir" not in driver.state.error


def test_the_database_behind_the_server_goes_to_the_sweep(monkeypatch):
    """A driver given the database behind the tracking server (EMBINIT_TRACKING_WRITE_DIRECT) hands it to
    the sweep, whose trial runs (their node and host tags included: embinit.tracking.trial_run) are
    written there, not through the server; the driver adds no trainer callback of its own, only the
    service's advice for a trial without data (tests/test_data_advice_recorded.py)."""
    from service.specs import DATA_ADVICE
    seen = {}

    def sweep(spec, tracking_uri, progress, stop, store_uri, **more):
        seen.update(tracking_uri=tracking_uri, store_uri=store_uri, more=more)
        return _result()
    _drive(monkeypatch, sweep, "http://mlflow:5000", store_uri="postgresql+psycopg://u@db/mlflow")
    assert (seen["tracking_uri"], seen["store_uri"]) == ("http://mlflow:5000", "postgresql+psycopg://u@db/mlflow")
    assert seen["more"] == {"advice": DATA_ADVICE}


def test_a_raising_sweep_is_failed_with_its_error(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("Ray cluster unreachable\nsecond line")
    driver = _drive(monkeypatch, boom)
    assert driver.state.status == "failed" and driver.state.error == "RuntimeError: Ray cluster unreachable"


def test_progress_stop_and_pickling(monkeypatch):
    seen = {}
    release = threading.Event()

    def sweep(spec, tracking_uri, progress, stop, store_uri, advice):
        seen["store_uri"] = store_uri
        for fn in (progress, stop):
            pickle.dumps(fn)  # what Tune does with its run config
        progress({"total": 4, "done": 1, "reused": 0, "running": 2, "pending": 1, "failed": 0})
        me = _DRIVERS["embinit-exp-p"]  # the driver itself (its constructor may not have returned yet)
        seen["running"] = dict(me.state.counts), me.state.status
        release.wait(5)
        seen["stop"] = stop()
        return _result(finished=1, cancelled=stop())

    monkeypatch.setattr(embinit.sweep, "run_sweep", sweep)
    driver = ExperimentDriver("embinit-exp-p", SPEC, "sqlite:///x.db", ["k"] * 4)
    assert driver.poll()["status"] in ("queued", "running")
    driver.cancel()
    release.set()
    for _ in range(500):
        if driver.state.finished_at:
            break
        time.sleep(0.01)
    assert seen["running"] == ({"pending": 1, "running": 2, "finished": 1, "failed": 0, "reused": 0}, "running")
    assert seen["stop"] is True and driver.poll()["status"] == "cancelled"
    assert seen["store_uri"] is None   # no database given: the trials write through the tracking URI
    assert _should_stop("embinit-exp-nobody") is False


def test_the_driver_is_placed_on_the_head_node(monkeypatch):
    """Left to Ray, a driver (no CPU) landed on any node, and a worker lost with its machine took the
    experiment with it (seen in tests/test_cluster_netns.py); it asks for the resource only the head has."""
    import ray

    from service.runner import RayRunner
    asked: dict = {}

    class Actor:
        def options(self, **kw):
            asked.update(kw)
            return self

        def remote(self, *args):
            return None
    monkeypatch.setattr(ray, "remote", lambda cls: Actor())
    runner = RayRunner(address="ray://head:10001")
    monkeypatch.setattr(runner, "connect", lambda: None)
    monkeypatch.setattr(runner, "_actor", lambda name: object())
    runner.start("t", SPEC, "sqlite:///x.db", ["k"])
    assert asked["resources"] == {"node:__internal_head__": 0.001} and asked["num_cpus"] == 0


class _LateRay:
    """Ray as Ray Client shows it: a just-created named actor is unknown for a while, then known (or,
    once lost, unknown for good)."""

    def __init__(self, visible_after: int):
        self.lookups, self.visible_after = 0, visible_after

    def actor(self, name):
        self.lookups += 1
        return object() if self.visible_after <= self.lookups else None


def _late_runner(monkeypatch, late: _LateRay, **kw):
    import ray

    from service.runner import RayRunner

    class Actor:
        def options(self, **_):
            return self

        def remote(self, *args):
            return None
    monkeypatch.setattr(ray, "remote", lambda cls: Actor())
    runner = RayRunner(address="ray://head:10001", **kw)
    monkeypatch.setattr(runner, "connect", lambda: None)
    monkeypatch.setattr(runner, "_actor", late.actor)
    return runner


def test_start_returns_once_ray_knows_the_driver_by_name(monkeypatch):
    late = _LateRay(visible_after=4)
    runner = _late_runner(monkeypatch, late, register_wait_s=5.0)
    runner.start("t", SPEC, "sqlite:///x.db", ["k"])
    assert late.lookups == 4          # it asked until Ray knew the name, and no more


def test_a_driver_ray_does_not_know_yet_is_starting_not_lost(monkeypatch):
    """Judged lost at once, a just-submitted experiment was failed 90 ms after its creation while its
    trial went on (the race tests/test_cluster_netns.py caught): within the start grace an unknown driver
    is "no answer now" (the reconciler keeps what it knew); after it, or for a driver this runner did not
    start, it is gone."""
    late = _LateRay(visible_after=10**9)             # never registered (or lost at once)
    runner = _late_runner(monkeypatch, late, register_wait_s=0.1, start_grace_s=0.5, gone_confirm_s=0.0)
    name = runner.start("t", SPEC, "sqlite:///x.db", ["k"])
    with pytest.raises(TimeoutError, match="does not know it yet"):
        runner.poll(name)
    assert runner.poll("embinit-exp-other") is None   # not started here: gone
    time.sleep(0.6)
    assert runner.poll(name) is None                  # the grace is over: gone


def test_one_lookup_that_misses_a_driver_does_not_make_it_gone(monkeypatch):
    """Gone fails the experiment and closes its running MLflow runs, and nothing undoes it; a lookup can
    miss a live driver, e.g. over a Ray Client connection just made or while its proxier is in trouble
    (the netns cluster's restarted API has hit `psutil.ZombieProcess` in Ray's proxier). So a driver this
    runner did not start is gone only when lookups `gone_confirm_s` apart both miss it; one found in
    between starts over."""
    misses = [True, False, True, True]               # each lookup in turn: does it miss the driver?

    class Handle:                                     # the driver's actor handle, answering "running"
        class poll:
            remote = staticmethod(lambda: "ref")
    runner = _late_runner(monkeypatch, _LateRay(1), gone_confirm_s=0.3)
    monkeypatch.setattr(runner, "_actor", lambda name: None if misses.pop(0) else Handle())
    monkeypatch.setattr("ray.get", lambda ref, timeout=None: {"status": "running"})
    with pytest.raises(TimeoutError, match="gone if Ray still does not know it 0.3 s after the first miss"):
        runner.poll("embinit-exp-restarted")          # a first miss: maybe there
    assert runner.poll("embinit-exp-restarted").status == "running"     # found: the miss is forgotten
    time.sleep(0.35)
    with pytest.raises(TimeoutError):
        runner.poll("embinit-exp-restarted")          # a new first miss, though the old one is long ago
    time.sleep(0.35)
    assert runner.poll("embinit-exp-restarted") is None                # missed again 0.3 s later: gone
