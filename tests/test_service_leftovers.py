"""Leftovers after faults (issue 20, item 10): a finished driver is released when it ends, not when
someone reads the experiment; the MLflow runs a failed driver left RUNNING are closed when it reports
the failure (and again later, when closing failed too, e.g. on a full disk)."""

from __future__ import annotations

import time

import pytest

from service.db import Experiment
from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.settings import Settings

from helpers.service import app_clients

SPEC = {"name": "leftovers", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 2}
FULL = "OSError: [Errno 28] No space left on device"


@pytest.fixture
def settings(tmp_path):
    def make(**kw):
        return Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        data_roots=[tmp_path], pretrained_roots=[tmp_path], refresh_interval_s=0.0,
                        _env_file=None, **kw)
    return make


def test_a_finished_driver_is_released_without_a_read(settings):
    cluster = FakeCluster()
    with app_clients(cluster) as open_client:
        client = open_client(settings(monitor_interval_s=0.05))
        exp_id = client.post("/experiments", json=SPEC).json()["id"]
        driver = f"embinit-exp-{exp_id}"
        FakeRunner(cluster).advance(driver, "succeeded", finished=2)
        deadline = time.monotonic() + 20
        while driver not in cluster.released and time.monotonic() < deadline:
            time.sleep(0.05)
        assert driver in cluster.released          # nobody read the experiment
        with client.app.state.sessions() as session:
            assert session.get(Experiment, exp_id).status == "succeeded"


def test_runs_are_closed_when_the_driver_reports_a_failure(settings):
    cluster = FakeCluster()
    with app_clients(cluster) as open_client:
        client = open_client(settings(monitor_interval_s=0))
        exp_id = client.post("/experiments", json=SPEC).json()["id"]
        driver = f"embinit-exp-{exp_id}"
        keys = cluster.specs[driver]["keys"]
        cluster.mlflow.update({keys[0]: "finished", keys[1]: "running"})  # the sweep could not close it
        FakeRunner(cluster).advance(driver, "failed", error=FULL, finished=1, failed=0, running=1)
        exp = client.get(f"/experiments/{exp_id}").json()
        assert exp["status"] == "failed" and exp["error"] == FULL
        assert cluster.mlflow[keys[1]] == "failed" and driver in cluster.released


class FullDisk(FakeStore):
    """MLflow's store cannot be written until `space` is set."""

    space = False

    def close_orphans(self, exp, reason, status="FAILED", tag=None):
        if not self.space:
            raise OSError(28, "No space left on device")
        return super().close_orphans(exp, reason, status, tag)


def test_closing_is_tried_again_until_the_disk_has_room(settings):
    from fastapi.testclient import TestClient

    from service.main import create_app

    cluster = FakeCluster()
    store = FullDisk(cluster)
    with TestClient(create_app(settings(monitor_interval_s=0), runner=FakeRunner(cluster), store=store)) as client:
        exp_id = client.post("/experiments", json=SPEC).json()["id"]
        driver = f"embinit-exp-{exp_id}"
        key = cluster.specs[driver]["keys"][0]
        cluster.mlflow[key] = "running"
        FakeRunner(cluster).advance(driver, "failed", error=FULL, running=1, pending=1)
        assert client.get(f"/experiments/{exp_id}").json()["status"] == "queued"   # not recorded yet
        assert driver not in cluster.released and cluster.mlflow[key] == "running"
        store.space = True                                                          # space freed
        assert client.get(f"/experiments/{exp_id}").json()["status"] == "failed"
        assert cluster.mlflow[key] == "failed" and driver in cluster.released


class DamagedStore(FakeStore):
    """MLflow's SQLite file is damaged past its schema: every read or write that reaches the damage fails."""

    def close_orphans(self, exp, reason, status="FAILED", tag=None):
        import sqlite3
        raise sqlite3.DatabaseError("database disk image is malformed")


def test_a_failure_whose_runs_a_damaged_store_cannot_close_is_recorded_naming_the_damage(settings):
    """Closing was retried on every read, so the experiment stayed 'queued' for good, its error None, the
    damage only in the server's log; now it fails, its error the driver's and the damage's, the driver
    released."""
    from fastapi.testclient import TestClient

    from service.main import create_app

    cluster = FakeCluster()
    store = DamagedStore(cluster, tracking_uri="sqlite:////data/mlflow.db")
    with TestClient(create_app(settings(monitor_interval_s=0), runner=FakeRunner(cluster), store=store)) as client:
        exp_id = client.post("/experiments", json=SPEC).json()["id"]
        driver = f"embinit-exp-{exp_id}"
        FakeRunner(cluster).advance(driver, "failed", error="DatabaseError: database disk image is malformed",
                                    running=1, pending=1)
        exp = client.get(f"/experiments/{exp_id}").json()
        assert exp["status"] == "failed" and driver in cluster.released
        assert exp["error"] == (
            "DatabaseError: database disk image is malformed; its MLflow runs could not be closed: /data/mlflow.db "
            "is a damaged SQLite database: SQLite found \"database disk image is malformed\" reading its runs; "
            "restore it from a copy (`sqlite3 /data/mlflow.db \"PRAGMA integrity_check\"` lists the damage, "
            "`sqlite3 /data/mlflow.db .recover` saves what it can)")
