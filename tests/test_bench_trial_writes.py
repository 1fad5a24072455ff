"""bench/bench_trial_writes.py runs end to end on a tiny store (in its own process: it times every
MlflowClient method by wrapping the class) and its figures add up: a trial costs commits, the SQL reader
reads the same runs as search_runs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_trial_writes.py"
pytestmark = pytest.mark.slow


def test_the_trial_writes_bench_runs_and_reports_per_trial_costs(tmp_path):
    out = tmp_path / "writes.json"
    subprocess.run([sys.executable, str(BENCH), "--trials", "4", "--prefill", "3", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=300)
    (row,) = json.loads(out.read_text())
    assert row["trials"] == 4 and row["prefill"] == 3 and row["cpu"]
    assert row["commits_per_trial"] >= 3 and row["ms_per_trial"] > 0
    assert row["calls"]["create_run"]["calls_per_trial"] == 1          # one new run per trial
    assert "search_runs" not in row["calls"]        # the key's runs: plain SQL (run_table)
    assert "get_run" not in row["calls"]                                # nothing read back to close it
    assert row["read_all"]["runs"] == 7 and row["read_all"]["sql_s"] > 0


def test_through_a_tracking_server_a_trial_is_five_requests(tmp_path):
    """Against an `mlflow server` each request is a round trip and the server's CPU bounds the sweep:
    the key's search, the run's creation, one batch (params, metrics, tags), result.json straight to the
    run's artifact location (no run lookup first) and the close (no lookup to print a link)."""
    out = tmp_path / "writes.json"
    subprocess.run([sys.executable, str(BENCH), "--trials", "3", "--server", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=300)
    (row,) = json.loads(out.read_text())
    assert row["server"] and row["commits_per_trial"] is None
    assert row["http_requests_per_trial"] == {"runs/search": 1, "runs/create": 1, "runs/log-batch": 1,
                                              "artifacts PUT": 1, "runs/update": 1}
    assert row["read_all"]["runs"] == 3       # the store behind the server holds the three trials
