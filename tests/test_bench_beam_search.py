"""bench/bench_beam_search.py runs end to end on a tiny model and batch and records what it promises: both
searches' times, their ratio, and that they returned the same hypotheses."""
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_beam_search.py"


def test_the_beam_search_bench_runs_and_both_searches_agree(tmp_path):
    out = tmp_path / "beam.json"
    subprocess.run([sys.executable, str(BENCH), "--sentences", "5", "--beams", "2", "3", "--d", "16",
                    "--vocab", "50", "--reps", "1", "--threads", "1", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=300)
    (row,) = json.loads(out.read_text())
    assert row["cpu"] and row["sentences"] == 5 and set(row["beams"]) == {"2", "3"}
    for beam in row["beams"].values():
        assert beam["same_hypotheses"] is True
        assert beam["ratio_old_over_new"] > 0 and len(beam["times_s"]["old"]) == 1
