"""The API's `eta_s` before the first trial ends, and `embinit experiments status --watch` with the running
trials' table (issue 22 item 9): the sweep's own estimate from epoch times travels from the driver's
progress sink through the state database (Ray and MLflow faked by `service.fakes`)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from live_server import serving

from embinit.cli import main
from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.main import create_app
from service.driver import DriverState, ExperimentDriver
from service.settings import Settings
from service.state import settle_counts

ROOT = Path(__file__).resolve().parents[1]
ROW = {"trial": "quickstart_00000", "epoch": "1/20", "best": "0.8123", "eta": "1m50s", "metric": "val/loss"}


def test_the_drivers_counts_carry_the_sweeps_eta_and_rows():
    driver = SimpleNamespace(state=DriverState("queued"))
    ExperimentDriver.progress(driver, {"pending": 7, "running": 2, "done": 0, "reused": 0, "failed": 0,
                                       "eta_s": 123.456, "trials": [ROW]})
    c = driver.state.counts
    assert driver.state.status == "running" and c["eta_s"] == 123.5 and c["running_trials"] == [ROW]
    assert settle_counts("running", c, 9)["eta_s"] == 123.5
    assert set(settle_counts("succeeded", c, 9)) == {"pending", "running", "finished", "failed", "reused"}


@pytest.fixture
def api(monkeypatch, tmp_path):
    for name in ("EMBINIT_API_URL", "EMBINIT_API_TOKEN", "EMBINIT_PRETRAINED_ROOTS", "EMBINIT_DATA_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)
    settings = Settings(_env_file=None, database_url=f"sqlite:///{tmp_path}/state.db", refresh_interval_s=0.0)
    cluster = FakeCluster()
    runner = FakeRunner(cluster)
    app = create_app(settings, runner=runner, store=FakeStore(cluster, settings.tracking_uri))
    with serving(app) as base:
        yield base, runner


def test_eta_before_the_first_trial_ends_and_status_watch(api, capsys):
    base, runner = api
    assert main(["experiments", "submit", "tune_configs/quickstart.yaml", "--url", base]) == 0
    exp_id = re.search(r"submitted: (\w+)", capsys.readouterr().out).group(1)
    driver = f"embinit-exp-{exp_id}"
    # two trials in their first epochs, none finished: the old rate-based ETA had nothing to divide by
    runner.advance(driver, "running", pending=7, running=2, finished=0, failed=0, reused=0, eta_s=120.0,
                   running_trials=[ROW])
    assert main(["experiments", "status", exp_id, "--url", base, "--json"]) == 0
    exp = json.loads(capsys.readouterr().out)
    assert exp["counts"] == {"pending": 7, "running": 2, "finished": 0, "failed": 0, "reused": 0}
    assert 100 < exp["eta_s"] <= 120.0 and exp["running_trials"] == [ROW]
    # --watch: the status and the running trials' table, again and again until the experiment ends
    done = threading.Timer(0.5, runner.advance, (driver, "succeeded"), {"pending": 0, "running": 0, "finished": 9,
                                                                       "failed": 0, "reused": 0})
    done.start()
    assert main(["experiments", "status", exp_id, "--url", base, "--watch", "--every", "0.2"]) == 0
    done.join()
    out = capsys.readouterr().out
    blocks = out.strip().split("\n\n")
    assert len(blocks) >= 2 and blocks[-1].splitlines()[0] == f"{exp_id}  quickstart  succeeded"
    first = blocks[0].splitlines()
    assert "ETA 1m" in first[1] or "ETA 2m00s" in first[1]
    assert first[3].split() == ["running", "trial", "epoch", "best", "val/loss", "ETA"]
    assert first[4].split() == ["quickstart_00000", "1/20", "0.8123", "1m50s"]
    assert "running trial" not in blocks[-1]
