"""A submission is validated once and its grid expanded once in the API process (the driver, another
process, validates and expands once more: tests/test_sweep_plan_once.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from service.fakes import FakeCluster
from service.specs import NOT_CHECKED_BUT_SIZES
from embinit.spec import ExperimentSpec

from helpers.service import rooted_clients
from helpers.spec_calls import count_spec_work

SPEC = {"name": "once", "tasks": ["synthetic_translation"], "inits": ["xavier", {"tgt": "glove", "pretrained":
        "vec.txt"}], "seeds": 2, "axes": {"lr": [0.001, 0.002]}}


@pytest.fixture
def counted(monkeypatch) -> Counter:
    return count_spec_work(monkeypatch, with_count=True)


def test_a_submission_validates_and_expands_once(tmp_path, counted):
    cluster = FakeCluster()
    with rooted_clients(tmp_path, cluster) as open_client:
        (tmp_path / "pretrained" / "vec.txt").write_text("the 0.1 0.2\n")
        client = open_client()
        counted.clear()
        r = client.post("/experiments", json=SPEC)
        assert r.status_code == 202, r.text
        assert r.json()["n_trials"] == 8
        assert counted == {"validate": 1, "plan": 1, "count": 1}, counted
        (sent,) = [s["spec"] for s in cluster.specs.values()]
        assert sent["inits"][1]["pretrained"] == str((tmp_path / "pretrained" / "vec.txt").resolve())
        counted.clear()
        again = client.post("/experiments", json=SPEC)  # the same spec: answered with its experiment
        assert again.status_code == 200 and again.json()["id"] == r.json()["id"]
        assert counted == {"validate": 1, "plan": 1, "count": 1}, counted


def test_paths_are_confined_before_the_validation_without_changing_its_answer(tmp_path):
    """Confining first must not turn a 422 into a 500: a name no filesystem takes (too long) under an
    unknown key is still refused as an unknown key."""
    with rooted_clients(tmp_path, FakeCluster()) as open_client:
        # the init's glove file exists: a missing one is a problem of its own (a glove source is no hub id)
        (tmp_path / "pretrained" / "vec.txt").write_text("the 0.1 0.2\n")
        r = open_client().post("/experiments", json={**SPEC, "foo": {"pretrained": "a" * 5000}})
        assert r.status_code == 422 and r.json()["detail"] == [{"loc": "foo", "msg": "unknown field 'foo'; valid: "
                                                                f"{sorted(ExperimentSpec.model_fields)}"},
                                                               {"loc": "", "msg": NOT_CHECKED_BUT_SIZES}]
