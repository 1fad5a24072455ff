"""bench/bench_gpu.py runs end to end in its tiny CPU setting, so it is ready when a GPU session runs it."""

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_gpu.py"


@pytest.mark.slow
def test_gpu_bench_smoke_writes_its_table_and_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(["--smoke", "--device", "cpu"])
    saved = json.loads((tmp_path / "bench_gpu.json").read_text())
    assert saved["smoke"] is True and saved["peak_bf16_tflops"] > 0
    for p in ("fp32", "bf16"):
        for side in ("embinit", "plain"):
            r = saved["single"][p][side]
            assert r["tokens_per_s"] > 0 and r["s_per_epoch"] > 0 and 0 < r["peak_share"] < 1
            assert r["tflops"] == pytest.approx(r["flops"] / r["seconds"] / 1e12)
    assert [(c["n"], c["mps"]) for c in saved["concurrent"]] == [(1, "n/a"), (2, "n/a")]
    assert all(c["tokens_per_s"] > 0 and c["trial_epochs_per_gpu_hour"] > 0 for c in saved["concurrent"])
    assert result["d"] == 32
    out = capsys.readouterr().out
    assert "| (a) one trial, embinit | bf16 |" in out and "| (b) trials at once |" in out
