"""A spec validates and expands with torch absent: the service's API and `embinit run --dry-run` check
specs without the training stack (embinit.init loads its torch-bound modules on first use)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"torch is blocked in this test (import of {name!r})")
            return None

    sys.meta_path.insert(0, NoTorch())
    from embinit.spec import SpecError, load_spec

    paths = sorted(Path(sys.argv[1]).rglob("*.yaml")) + sorted(Path(sys.argv[1]).rglob("*.yml"))
    for path in paths:
        spec = load_spec(path)
        assert spec.plan() and spec.num_trials() >= len(spec.plan()), path
    try:
        load_spec({"name": "x", "tasks": ["sst2"], "inits": [{"source": "glove", "transform": "standardise"}]})
    except SpecError as e:
        assert e.problems[0][0] == "inits[0].transform", e.problems
    else:
        raise AssertionError("an unknown transform passed")
    assert "torch" not in sys.modules
    print(len(paths))
""")


def test_every_tune_config_validates_without_torch(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EMBINIT_ASSETS": str(tmp_path / "assets"),
           "EMBINIT_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "tune_configs")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1]) >= 15


MARKED = textwrap.dedent("""
    import sys
    from embinit.spec.vector_files import vector_file_problems
    assert vector_file_problems([("pretrained.glove", sys.argv[1])]) == []
    print("torch" in sys.modules)
""")


def test_a_vector_file_found_sound_before_is_checked_without_torch(tmp_path):
    """A later process's check of a file found sound (embinit.spec.vector_files' mark) imports no torch:
    ~1 s of a rerun's or a dry run's 4 s, and ~180 MB of its RSS."""
    vectors = tmp_path / "g.txt"
    vectors.write_text("the 0.1 0.2\ncat 0.3 0.4\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EMBINIT_CACHE_DIR": str(tmp_path / "cache")}

    def torch_imported() -> str:
        proc = subprocess.run([sys.executable, "-c", MARKED, str(vectors)], env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.split()[-1]
    assert torch_imported() == "True"    # read through (embinit.init.vectors holds torch)
    assert torch_imported() == "False"   # the mark answers
