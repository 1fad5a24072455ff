"""Ctrl-C during `embinit run`, as a terminal sends it (SIGINT to the whole process group): the running
trial is stopped and recorded as `interrupted`, not failed; the message says that running the spec again
resumes, and Ray Tune's `Tuner.restore` hint does not appear."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from embinit import run_readers

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_ctrl_c_marks_trials_interrupted_and_says_how_to_resume(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = tmp_path / "long.yaml"
    spec.write_text(f"name: interrupt-me\ntasks: [{{task: synthetic_translation, epochs: 50}}]\n"
                    f"inits: [xavier]\nseeds: 1\nresources: {{cpus: 1}}\ncache_dir: {tmp_path}/cache\n"
                    f"mlflow: {{tracking_uri: '{uri}', log_checkpoint: false}}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "embinit", "run", str(spec)], cwd=tmp_path, env=env,
                            stdout=(tmp_path / "out.txt").open("w"), stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:  # the trial started (progress line) ...
            if any(" 1 running" in line for line in lines):
                break
            time.sleep(0.5)
        while time.monotonic() < deadline and proc.poll() is None:  # ... and its MLflow run is open
            if any(t["status"] == "running" for t in run_readers.list_trials("interrupt-me", uri)):
                break
            time.sleep(1)
        assert proc.poll() is None, "".join(lines)
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal
        proc.wait(timeout=180)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    err, out = "".join(lines), (tmp_path / "out.txt").read_text()
    assert proc.returncode == 130, err
    assert "Tuner.restore" not in err + out
    assert "the stopped ones are marked 'interrupted'" in err
    assert f"embinit run {spec}` again to resume" in err   # `embinit` or its path (embinit.commands)
    statuses = [t["status"] for t in run_readers.list_trials("interrupt-me", uri)]
    assert statuses == ["interrupted"], statuses
