"""The trial folder's side files (embinit.checkpoint_files): `last.json` has one parser, which the node's
reader (embinit.train.checkpoint.last_epoch) and the store's (embinit.storage.Mirror.epoch) both use, so
they agree on good, foreign, incomplete and damaged files; the names and the artifact path are declared
once; the init sample is plain arrays, and a pickle in its place (crafted, or an older sweep's `.npy`) is
refused with a message and never unpickled, though the folder comes through the object store."""

from __future__ import annotations

import ast
import json
import pickle
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from embinit import checkpoint_files as cf
from embinit.errors import EmbinitError
from embinit.storage import Mirror, Store
from helpers.s3 import use_store

ROOT = Path(__file__).resolve().parents[1]
PLOTS_ONLY = SimpleNamespace(log_checkpoint=False, log_plots=True, log_outputs=True)   # a sweep's logging settings

# (last.json's bytes, the epoch it names for trial "k")
LAST_INFOS = [
    (b'{"key": "k", "epoch": 3}', 3),
    (cf.last_info_text("k", 7).encode(), 7),
    (b'{"key": "other", "epoch": 3}', None),      # another trial's
    (b'{"epoch": 3}', None),                       # no key
    (b'{"key": "k"}', None),                       # no epoch (the old readers raised KeyError)
    (b'{"key": "k", "epoch": "3"}', None),         # an epoch that is not a number
    (b'{"key": "k", "epoch": 2.5}', None),
    (b'{"key": "k", "epoch": true}', None),
    (b'{"key": "k", "epoch": -1}', None),
    (b'["k", 3]', None),                           # not an object (the old readers raised AttributeError)
    (b'{"key": "k", "epo', None),                  # cut short
    (b"", None),
    (b"\xff\xfe\x00garbage", None),                # not text
]


@pytest.mark.parametrize(("text", "epoch"), LAST_INFOS)
def test_last_json_has_one_parser(text, epoch):
    assert cf.parse_last_info(text, "k") == epoch
    if epoch is not None or text[:1] == b"{":
        assert cf.parse_last_info(text.decode(errors="replace"), "k") == epoch


def test_the_node_and_the_store_read_last_json_alike(endpoint, monkeypatch, tmp_path):
    """The answers `embinit.sweep.resume._fetch` compares come from the one parser, file for file."""
    from embinit.train.checkpoint import last_epoch
    store = Store.from_uri(use_store(monkeypatch, endpoint))
    for i, (text, epoch) in enumerate(LAST_INFOS):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / cf.LAST).write_bytes(b"weights")
        (folder / cf.LAST_INFO).write_bytes(text)
        mirror = Mirror(store, "exp", "k")
        mirror.push(folder)
        assert (last_epoch(folder, "k"), Mirror(store, "exp", "k").epoch()) == (epoch, epoch), text
        mirror.clear()
    assert Mirror(store, "exp", "k").epoch() is None                 # no last.json in the store
    assert last_epoch(tmp_path / "missing", "k") is None             # nor on the node
    (tmp_path / "0" / cf.LAST).unlink()
    assert last_epoch(tmp_path / "0", "k") is None                   # last.json without its last.pt


def test_the_side_file_names_are_declared_once():
    """No module but checkpoint_files spells the names or the artifact path in its code (prose aside)."""
    names = {cf.LAST, cf.BEST, cf.LAST_INFO, cf.BEST_ARTIFACT, cf.INIT_SAMPLE, cf.OLD_INIT_SAMPLE}
    found = []
    for path in sorted((ROOT / "embinit").rglob("*.py")):
        if path.name == "checkpoint_files.py" and path.parent.name == "embinit":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert found == []


def test_the_artifact_the_sweep_logs_is_the_one_the_analyses_download(tmp_path):
    from embinit.sweep.reporting import artifacts
    (tmp_path / cf.BEST).write_bytes(b"best")
    ctx = SimpleNamespace(log_checkpoint=True, log_plots=False, log_outputs=True)
    [(artifact_dir, local)] = artifacts({"history": []}, tmp_path, ctx, "t")
    assert f"{artifact_dir}/{Path(local).name}" == cf.BEST_ARTIFACT


def test_the_module_imports_neither_torch_nor_mlflow():
    script = ("import sys\nimport embinit.checkpoint_files, embinit.storage\n"
              "print(sorted(m for m in ('torch', 'mlflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


# ---- the init sample

class _RunsCode:
    """Unpickling this runs code: it writes `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('unpickled')",)


def _old_format(path: Path, payload) -> None:
    """The file as the sweep wrote it before: `np.save` of a dict, pickled."""
    with path.open("wb") as f:
        np.save(f, {"values": payload, "shape": (3, 4)}, allow_pickle=True)


def test_the_init_sample_is_plain_arrays(tmp_path):
    path = cf.write_init_sample(tmp_path / cf.INIT_SAMPLE, np.arange(6, dtype=np.float64) / 10, (2, 3))
    assert path == tmp_path / cf.INIT_SAMPLE and sorted(p.name for p in tmp_path.iterdir()) == [cf.INIT_SAMPLE]
    with np.load(path, allow_pickle=False) as data:                 # readable without pickle
        assert {k: data[k].dtype.kind for k in data.files} == {"values": "f", "shape": "i"}
    values, shape = cf.read_init_sample(path)
    assert values.tolist() == pytest.approx([0, 0.1, 0.2, 0.3, 0.4, 0.5]) and shape == (2, 3)


def test_the_trainer_side_writes_the_sample_the_plot_reads(tmp_path):
    import torch
    from embinit.sweep.reporting import _save_init_sample
    table = torch.nn.Embedding(50, 8)
    _save_init_sample(SimpleNamespace(embeddings=lambda: {"tgt": table}), tmp_path / cf.INIT_SAMPLE)
    values, shape = cf.read_init_sample(tmp_path / cf.INIT_SAMPLE)
    assert shape == (50, 8) and np.allclose(values, table.weight.detach().numpy().ravel())


@pytest.mark.parametrize("craft", ["raw pickle", "npy of an object", "npz with an object"])
def test_a_pickle_in_place_of_the_init_sample_is_never_unpickled(tmp_path, craft):
    marker, path = tmp_path / "marker", tmp_path / cf.INIT_SAMPLE
    if craft == "raw pickle":
        path.write_bytes(pickle.dumps({"values": _RunsCode(marker), "shape": (3, 4)}))
    elif craft == "npy of an object":
        _old_format(path, _RunsCode(marker))
    else:
        with path.open("wb") as f:
            np.savez(f, values=np.array([_RunsCode(marker)], dtype=object), shape=np.array([3, 4]))
    pickle.loads(pickle.dumps(_RunsCode(tmp_path / "control")))     # the payload does run when unpickled
    assert (tmp_path / "control").read_text() == "unpickled"
    with pytest.raises(EmbinitError, match=r"cannot read the init sample .*pickle"):
        cf.read_init_sample(path)
    assert not marker.exists()


def test_an_older_sweeps_pickled_sample_is_refused_with_a_warning_and_costs_only_the_plot(tmp_path):
    """A trial folder resumed across the upgrade (or fetched from the store) still holds the old `.npy`:
    the trial's artifacts are collected without it, and it is not unpickled."""
    from embinit.sweep.reporting import artifacts
    marker = tmp_path / "marker"
    _old_format(tmp_path / cf.OLD_INIT_SAMPLE, _RunsCode(marker))
    (tmp_path / cf.BEST).write_bytes(b"best")
    ctx = SimpleNamespace(log_checkpoint=True, log_plots=True, log_outputs=True)
    with pytest.warns(RuntimeWarning, match=r"older pickled format, which is not loaded.*no init histogram"):
        files = artifacts({"history": []}, tmp_path, ctx, "t")
    assert files == [(cf.BEST_ARTIFACT_DIR, str(tmp_path / cf.BEST))]
    assert not marker.exists()


def test_a_crafted_sample_under_the_new_name_costs_only_the_plot(tmp_path):
    from embinit.sweep.reporting import artifacts
    marker = tmp_path / "marker"
    _old_format(tmp_path / cf.INIT_SAMPLE, _RunsCode(marker))
    with pytest.warns(RuntimeWarning, match=r"Object arrays cannot be loaded when allow_pickle=False.*never loaded"):
        assert artifacts({"history": []}, tmp_path, PLOTS_ONLY, "t") == []
    assert not marker.exists()


def test_a_good_sample_gives_the_histogram(tmp_path):
    from embinit.sweep.reporting import artifacts
    cf.write_init_sample(tmp_path / cf.INIT_SAMPLE, np.linspace(-0.1, 0.1, 40), (10, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        files = artifacts({"history": []}, tmp_path, PLOTS_ONLY, "t")
    assert files == [("plots", str(tmp_path / "init_histogram.png"))] and Path(files[0][1]).stat().st_size > 0


@pytest.mark.parametrize(("content", "why"), [
    (b"", "No data left in file"),
    (b"PK\x03\x04 cut short", "File is not a zip file|not a zip"),
    (None, "an .npy array, not the .npz"),
    (json.dumps({"values": [1]}).encode(), "pickle|Failed to interpret"),
])
def test_a_damaged_or_foreign_sample_is_refused_with_its_reason(tmp_path, content, why):
    path = tmp_path / cf.INIT_SAMPLE
    if content is None:
        with path.open("wb") as f:
            np.save(f, np.zeros(3, dtype=np.float32))
    else:
        path.write_bytes(content)
    with pytest.raises(EmbinitError, match=f"cannot read the init sample .*({why})"):
        cf.read_init_sample(path)
    with pytest.raises(EmbinitError, match="'values' must be a 1-D float array"):
        cf.read_init_sample(cf.write_init_sample(tmp_path / "bad.npz", [1.0], (0, 3)))
