"""The service's database passwords (EMBINIT_TRACKING_URI, EMBINIT_DATABASE_URL, EMBINIT_TRACKING_READ_URI
may each hold one) reach no client and no log line: not in a 422 naming the service's store, not as an
oracle telling a right guess of it from a wrong one, not in an experiment's error, not in the log."""

from __future__ import annotations

import logging

import pytest

from service.fakes import FakeCluster

from helpers.service import problems, rooted_clients

STORE = "postgresql+psycopg://mlflow:s3cret-pw@127.0.0.1:1/mlflow"
SPEC = {"name": "sec", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}


@pytest.fixture
def cluster():
    return FakeCluster()


@pytest.fixture
def client(tmp_path, cluster):
    with rooted_clients(tmp_path, cluster) as open_client:
        yield open_client(tracking_uri=STORE, tracking_read_uri="postgresql://reader:r3ad-pw@db/mlflow")


def test_a_spec_naming_another_store_is_told_the_services_store_masked(client):
    r = client.post("/experiments", json={**SPEC, "mlflow": {"tracking_uri": "sqlite:///other.db"}})
    assert "s3cret-pw" not in r.text
    assert "'postgresql+psycopg://mlflow:***@127.0.0.1:1/mlflow'" in problems(r)["mlflow.tracking_uri"]


def test_a_guess_of_the_stores_password_is_answered_as_a_wrong_one(client):
    """Were the right password accepted and a wrong one refused, the API would check guesses of it."""
    right = client.post("/experiments", json={**SPEC, "mlflow": {"tracking_uri": STORE}})
    wrong = client.post("/experiments", json={**SPEC, "name": "sec2",
                                              "mlflow": {"tracking_uri": STORE.replace("s3cret-pw", "guess")}})
    assert (right.status_code, wrong.status_code) == (202, 202), (right.text, wrong.text)
    detail = client.get(f"/experiments/{wrong.json()['id']}").json()
    assert detail["spec"]["mlflow"]["tracking_uri"] is None     # the service's store, whatever was written


def test_an_experiments_error_quoting_a_password_shows_it_masked(client, cluster):
    exp_id = client.post("/experiments", json=SPEC).json()["id"]
    driver = next(iter(cluster.drivers))
    state = cluster.drivers[driver]
    state.status, state.error = "failed", "OperationalError: password authentication failed (s3cret-pw, r3ad-pw)"
    body = client.get(f"/experiments/{exp_id}").text + client.get("/experiments").text
    assert "s3cret-pw" not in body and "r3ad-pw" not in body
    assert "password authentication failed (***, ***)" in client.get(f"/experiments/{exp_id}").json()["error"]


def test_the_service_logs_its_stores_masked(tmp_path, cluster, caplog):
    caplog.set_level(logging.INFO, logger="embinit.service")
    with rooted_clients(tmp_path, cluster) as open_client:
        open_client(tracking_uri=STORE, database_url=f"sqlite:///{tmp_path}/state.db")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "postgresql+psycopg://mlflow:***@127.0.0.1:1/mlflow" in logged and "s3cret-pw" not in logged
