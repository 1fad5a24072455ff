"""tune_configs/gpu/run_batch.sh, the GPU reproduction's batches (issue 19): every spec it runs exists and
loads, every batch the usage line names has a case, and a wrong batch or a missing variable is refused
before anything runs. (The batches themselves run on the device; bench/gpu_stretch.sh's CPU rehearsal runs
one with tiny overrides.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tune_configs" / "gpu" / "run_batch.sh"


def test_every_spec_the_batches_run_exists_and_loads(monkeypatch, tmp_path):
    from embinit.spec import load_spec
    monkeypatch.setenv("EMBINIT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("EMBINIT_ASSETS", str(tmp_path / "assets"))
    text = SCRIPT.read_text()
    specs = sorted(set(re.findall(r"tune_configs/\S+?\.yaml", text)))
    assert "tune_configs/offline/oov_rules_focus.yaml" in specs and "tune_configs/gpu/dose_response_sigma.yaml" in specs
    for spec in specs:
        assert load_spec(REPO / spec).name, spec
    usage = re.search(r"BATCH=\$\{1:\?usage: run_batch\.sh ([\w|]+)\}", text).group(1).split("|")
    cases = set(re.findall(r"^  (\w+)\)", text, re.M))
    assert set(usage) == cases and {"dose", "oov", "report"} <= cases


def test_a_wrong_batch_or_a_missing_variable_is_refused(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "EMBINIT_DATA_DIR": str(tmp_path), "EMBINIT_ASSETS": str(tmp_path),
           "REPRO_DIR": str(tmp_path / "runs")}
    wrong = subprocess.run(["bash", str(SCRIPT), "nonesuch"], cwd=REPO, env=env, capture_output=True, text=True)
    assert wrong.returncode == 2 and "unknown batch nonesuch" in wrong.stderr
    bare = subprocess.run(["bash", str(SCRIPT), "oov"], cwd=REPO, env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)
    assert bare.returncode != 0 and "EMBINIT_DATA_DIR" in bare.stderr
    assert not (tmp_path / "runs" / "mlflow.db").exists()
