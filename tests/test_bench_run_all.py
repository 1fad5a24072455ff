"""bench/run_all.py (the Makefile's `bench` target) knows every benchmark script."""
import importlib.util
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _run_all():
    spec = importlib.util.spec_from_file_location("bench_run_all", BENCH / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_all_lists_every_bench_script():
    assert set(_run_all().BENCHES) == {p.stem for p in BENCH.glob("bench_*.py")}


def test_dry_run_skips_a_benchmark_without_its_inputs(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "EMBINIT_GLOVE": str(tmp_path / "absent.txt")}
    out = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "--dry-run", "--only", "bench_analogy",
                          "bench_api"], capture_output=True, text=True, env=env, check=True).stdout
    assert "[skip] bench_analogy: set $EMBINIT_GLOVE, $EMBINIT_ANALOGY_QUESTIONS" in out
    assert "bench_api.py" in out and "[ok]" not in out
