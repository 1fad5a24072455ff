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
    assert row["calls"]["search_runs"]["calls_per_trial"] == 1         # the key's runs, read once
    assert "get_run" not in row["calls"]                                # nothing read back to close it
    assert row["read_all"]["runs"] == 7 and row["read_all"]["sql_s"] > 0
