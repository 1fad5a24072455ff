"""Every module of embinit imports on its own, as the first embinit module of a process.

The import-graph test (`test_import_cycles.py`) sees `import` statements; a registry that loads its
entries by `module:attribute` string at import time (the transform registry) can close a cycle it cannot
see: `import embinit.init.rescale` alone failed with "partially initialized module" while the package
imported fine. Each module is imported here after every embinit module was dropped from `sys.modules`,
all in one subprocess (torch and the third-party packages stay loaded, so it takes seconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import importlib, pkgutil, sys, traceback
import embinit
names = sorted(m.name for m in pkgutil.walk_packages(embinit.__path__, "embinit.")
               if not m.name.endswith("__main__"))
failed = []
for name in names:
    for loaded in [k for k in sys.modules if k == "embinit" or k.startswith("embinit.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 (every failure is reported)
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print(len(names))
print("\n".join(failed))
"""


def test_every_module_imports_first():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    count, *failed = out.stdout.strip().splitlines()
    assert int(count) > 100
    assert not [f for f in failed if f], "modules that fail to import on their own:\n" + "\n".join(failed)
