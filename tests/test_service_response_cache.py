"""The memory of finished experiments' rendered responses (`service.response_cache`) is bounded in bytes,
not only in entries: `/trials` pages are keyed by `limit` and `offset`, so a client walking the offsets
of a large finished experiment one by one (each page up to megabytes) must not grow the API's memory
until the process, and the local Ray and experiments it holds, dies."""

from __future__ import annotations

from service.fakes import FakeCluster, FakeRunner
from service.response_cache import ResponseCache
from service.settings import Settings

from helpers.service import app_clients

SPEC = {"name": "cache", "tasks": ["synthetic_lm"], "inits": ["xavier", "normal"], "seeds": 20}


def test_the_cache_keeps_to_its_byte_budget_newest_first():
    cache = ResponseCache(max_entries=100, max_bytes=1000)
    for i in range(10):
        cache.put(("trials", "e", 1, i), (b"x" * 300, "application/json"))
    kept = [i for i in range(10) if cache.get(("trials", "e", 1, i)) is not None]
    assert kept == [7, 8, 9] and cache.size_bytes == 900
    cache.put(("big",), (b"x" * 1001, "application/json"))   # larger than the whole budget: not kept
    assert cache.get(("big",)) is None and cache.size_bytes == 900
    cache.put(("trials", "e", 1, 9), (b"y" * 10, "application/json"))   # replaced, not counted twice
    assert cache.size_bytes == 610 and cache.get(("trials", "e", 1, 9))[0] == b"y" * 10


def test_walking_the_offsets_of_a_finished_experiment_keeps_the_api_within_its_budget(tmp_path):
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        data_roots=[tmp_path], pretrained_roots=[tmp_path], refresh_interval_s=0.0,
                        _env_file=None)
    cluster = FakeCluster()
    with app_clients(cluster) as open_client:
        client = open_client(settings)
        client.app.state.responses = ResponseCache(max_bytes=20_000)
        exp_id = client.post("/experiments", json=SPEC).json()["id"]
        FakeRunner(cluster).advance(f"embinit-exp-{exp_id}", "succeeded", finished=40)
        sizes = [len(client.get(f"/experiments/{exp_id}/trials", params={"offset": i}).content) for i in range(40)]
        assert sum(sizes) > 60_000   # what an entry-bounded cache would have kept
        assert client.app.state.responses.size_bytes <= 20_000
        # still served right after eviction (built again)
        assert client.get(f"/experiments/{exp_id}/trials", params={"offset": 0}).json()["total"] == 40
