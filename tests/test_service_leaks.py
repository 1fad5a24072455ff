"""The API process runs for days: what it keeps per experiment must go when the experiment ends
(bench/bench_leaks.py --api measures it over many experiments)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from service.fakes import FakeCluster, FakeRunner
from service.runner import RayRunner
from service.store import ResultStore
from service.settings import Settings
from helpers.service import app_clients

SPEC = {"tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}


def test_the_reconciler_keeps_nothing_of_finished_experiments(tmp_path):
    cluster = FakeCluster()
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        refresh_interval_s=0.0, _env_file=None)
    with app_clients(cluster) as open_client:
        client = open_client(settings)
        ids = [client.post("/experiments", json={**SPEC, "name": f"leak-{i}"}).json()["id"] for i in range(3)]
        for exp_id in ids:
            assert client.get(f"/experiments/{exp_id}").json()["status"] in ("queued", "running")
        reconciler = client.app.state.reconciler
        assert len(reconciler._checked) == 3      # what it keeps of running ones: when each was checked
        for exp_id in ids:
            FakeRunner(cluster).advance(f"embinit-exp-{exp_id}", "succeeded", finished=1)
            assert client.get(f"/experiments/{exp_id}").json()["status"] == "succeeded"
        assert (dict(reconciler._checked), dict(reconciler._locks)) == ({}, {})


def _exp(exp_id: str, status: str, updated: int):
    return SimpleNamespace(id=exp_id, status=status, updated_at=updated)


def test_the_result_store_keeps_no_live_build_of_a_finished_experiment(tmp_path):
    store = ResultStore(f"sqlite:///{tmp_path}/m.db", cache_size=4, live_cost_factor=1e9)
    for baseline in (None, "Xavier", "Normal"):     # a report per baseline read while it ran
        store._current(("report", baseline), _exp("1", "running", 1), lambda: {"rows": [0] * 1000})
    store._current(("trials",), _exp("1", "running", 1), lambda: [0] * 1000)
    store._current(("trials",), _exp("1", "succeeded", 2), lambda: [1] * 1000)   # read once, finished
    assert not [k for k in store._live if k[-1] == "1"]


def test_the_result_store_keeps_a_bounded_number_of_live_builds(tmp_path):
    """Experiments read while they ran and never read again once finished (another API's reconciler
    saw them end) leave at most `cache_size` live builds."""
    store = ResultStore(f"sqlite:///{tmp_path}/m.db", cache_size=4)
    for i in range(50):
        store._current(("trials",), _exp(str(i), "running", 1), lambda: [0] * 1000)
    assert len(store._live) == 4 and ("trials", "49") in store._live


def test_a_released_driver_leaves_nothing_in_the_runner(monkeypatch):
    runner = RayRunner()
    monkeypatch.setattr(runner, "_actor", lambda driver: None)   # gone already: nothing for Ray to kill
    for i in range(20):
        runner._started[f"embinit-exp-{i}"] = time.monotonic()
        runner._missed[f"embinit-exp-{i}"] = time.monotonic()
        runner.release(f"embinit-exp-{i}")
    assert (runner._started, runner._missed) == ({}, {})
