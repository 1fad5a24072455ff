"""`embinit run SPEC --dry-run`: the expanded trial list and its size; bad specs exit 2 with one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from embinit.cli import main
from embinit.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_lists_every_trial_and_the_total(capsys):
    path = ROOT / "tune_configs" / "quickstart.yaml"
    assert main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    spec = load_spec(path)
    for p in spec.plan():
        assert p.key in out
    assert f"{len(spec.plan())} trials" in out
    assert "Pretrained_Xavier" in out and "MLflow experiment 'quickstart'" in out


def test_dry_run_shows_axes_and_search_points(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: g\ntasks: [synthetic_classification]\ninits: [xavier]\nseeds: 2\n"
                    "axes: {pos_encoding: [true, false]}\nsearch: {space: {lr: [0.001, 0.002]}}\n")
    assert main(["run", str(spec), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "8 trials" in out and '"pos_encoding": false' in out and '"lr": 0.002' in out


def test_optuna_dry_run_explains_the_budget(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: o\ntasks: [synthetic_classification]\ninits: [xavier, normal]\nseeds: 2\n"
                    "search: {method: optuna, num_samples: 3, space: {lr: {low: 0.0001, high: 0.01}}}\n")
    assert main(["run", str(spec), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "12 trials" in out and "optuna: 3 points x 2 seeds" in out


def test_invalid_spec_exits_2_with_every_problem_on_its_own_line(tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\ntasks: [nope]\ninits: [glove+standardise]\nseeds: 0\n")
    assert main(["run", str(spec), "--dry-run"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "embinit: error: invalid experiment spec (3 problems):"
    assert [line.split(":")[0] for line in lines[1:4]] == ["  - tasks[0].task", "  - inits[0]", "  - seeds"]
    assert len(lines) == 6 and all(line.startswith("  ") and " not " in line for line in lines[4:]), lines


def test_missing_file_and_unset_variable(tmp_path, capsys, monkeypatch):
    assert main(["run", str(tmp_path / "none.yaml"), "--dry-run"]) == 2
    assert "cannot read spec file" in capsys.readouterr().err
    monkeypatch.delenv("EMBINIT_ASSETS", raising=False)
    assert main(["run", str(ROOT / "tune_configs" / "offline" / "sst2_glove50.yaml"), "--dry-run"]) == 2
    assert "EMBINIT_ASSETS is not set" in capsys.readouterr().err


def _incomplete_data(root: Path) -> Path:
    """A data root whose sst2 folder has train.tsv only and whose multi30k folder lacks its test pair."""
    (root / "sst2").mkdir(parents=True)
    (root / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\t1\n")
    (root / "multi30k").mkdir()
    for name in ("train.de", "train.en", "val.de", "val.en"):
        (root / "multi30k" / name).write_text("x\n")
    return root


def test_dry_run_lists_every_missing_data_file(tmp_path, capsys):
    root = _incomplete_data(tmp_path / "data")
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: d\ndata_dir: {root}\ntasks: [sst2, multi30k, {{task: wikitext2, data_dir: {root}/sst2}}]\n"
                    "inits: [xavier]\n")
    assert main(["run", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("embinit: error: invalid experiment spec (3 problems)")
    assert f"data_dir: sst2: data folder {root}/sst2 lacks dev.tsv" in err
    assert "multi30k: data folder" in err and "test_2016_flickr.de" in err
    assert "tasks[2].data_dir: wikitext2:" in err and "train_split='valid'" in err


def test_an_incomplete_data_dir_folder_is_refused_before_the_store_is_made(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EMBINIT_DATA_DIR", str(_incomplete_data(tmp_path / "data")))
    spec = tmp_path / "s.yaml"
    spec.write_text("name: d\ntasks: [sst2]\ninits: [xavier]\n")
    db = tmp_path / "m.db"
    assert main(["run", str(spec), "--tracking-uri", f"sqlite:///{db}", "--quiet"]) == 2
    assert "tasks[0]: sst2: data folder" in capsys.readouterr().err
    assert not db.exists()


@pytest.mark.parametrize("execution, expected", [
    ({"fuse": "always", "max_group": 4}, "2 fused groups (4, 4), 0 trials alone"),
    ({"fuse": "auto"}, "the trials run on CPU (resources.gpus: 0)"),
    ({"fuse": "off"}, None)])
def test_dry_run_shows_how_the_trials_would_fuse(tmp_path, capsys, monkeypatch, execution, expected):
    """4 inits x 2 seeds on a machine that runs one trial at a time."""
    import os
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    spec = tmp_path / "f.yaml"
    spec.write_text(yaml.safe_dump({"name": "f", "tasks": ["synthetic_classification"], "seeds": 2,
                                    "inits": ["xavier", "normal", "xavier_normal", "xavier+rescale=4x"],
                                    "resources": {"cpus": 1}, "execution": execution}))
    assert main(["run", str(spec), "--dry-run"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("execution:")]
    assert (lines == []) if expected is None else (len(lines) == 1 and expected in lines[0]), out


def test_dry_run_refuses_settings_no_trial_may_combine_with_the_other_problems(tmp_path, capsys):
    """Not a sweep that starts Ray and then fails every trial in the trainer's check."""
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ntasks: [synthetic_translation]\ninits: [xavier]\nseeds: 2\nretries: -1\n"
                    "defaults: {tie_embeddings: true, train_embeddings: false, freeze_non_embeddings: true}\n")
    assert main(["run", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("embinit: error: invalid experiment spec (3 problems):\n  - retries: ")
    assert len(err.splitlines()) == 5, err
    assert err.endswith("\n  model sizes not checked until the problems above are fixed\n")
    assert ("trials synthetic_translation x Xavier: train_embeddings=False with freeze_non_embeddings=True "
            "leaves nothing to train") in err
    assert ("trials synthetic_translation x Xavier: tie_embeddings applies to language models only; "
            "'synthetic_translation' is a translation task") in err


def test_dry_run_refuses_extras_no_trial_could_take_before_anything_is_written(tmp_path, capsys):
    """A misspelled switch or a value out of range failed every trial (a FAILED run each) after the
    check had passed; now the check lists them, with the valid keys."""
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ntasks: [{task: synthetic_translation, extras: {noize: 0.4, val_bleu: 'no'}},\n"
                    "        {task: synthetic_lm, extras: {noise: 0.5}}]\ninits: [xavier]\n")
    db = tmp_path / "mlflow.db"
    assert main(["run", str(spec), "--dry-run", "--tracking-uri", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert "invalid experiment spec (3 problems)" in err
    assert "trials synthetic_translation x Xavier: unknown extras key 'noize'; valid: [" in err
    assert "did you mean 'noise'?" in err
    assert "extras val_bleu is a switch: true or false, got 'no'" in err
    assert "trials synthetic_lm x Xavier: extras noise is an option of synthetic_translation only" in err
    assert not db.exists()


@pytest.fixture(scope="module")
def real_store(tmp_path_factory) -> Path:
    from embinit.tracking.prepare import prepare_store
    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    prepare_store(f"sqlite:///{db}")
    return db


def _tiny(tmp_path: Path) -> str:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: d\ntasks: [synthetic_translation]\ninits: [xavier]\nseeds: 1\n")
    return str(spec)


@pytest.mark.parametrize("kind, message", [
    ("notes", "is not an MLflow store: it has tables [notes]; give a new file or an MLflow store"),
    ("state", "is not an MLflow store: it has tables [experiments"),
    ("random", "is not an SQLite database (it does not start with SQLite's header)"),
    ("truncated", "is a damaged SQLite database: truncated ("),
])
def test_dry_run_refuses_a_file_the_run_would_refuse_and_leaves_it_as_it_was(kind, message, real_store, tmp_path,
                                                                             capsys):
    """A dry run reads finished trials from the store; it never gives another file MLflow's tables (it
    once did, by opening an MLflow client on it), and says in one line what `run` would refuse."""
    from helpers.bad_stores import notes_db, random_bytes, snapshot, state_db, truncated
    make = {"notes": notes_db, "state": state_db, "random": random_bytes,
            "truncated": lambda p: truncated(real_store, p)}[kind]
    db, spec = make(tmp_path / "other.db"), _tiny(tmp_path)
    before = snapshot(db)
    assert main(["run", spec, "--dry-run", "--tracking-uri", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err
    assert f"{db} {message}" in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(db) == before


@pytest.mark.parametrize("shape, message", [
    ("sqlit:///{db}", "unknown scheme 'sqlit' in the tracking URI sqlit:///{db}"),
    ("sqlite:{db}", "'sqlite:{db}' is not a SQLite URI"),
    ("{db}", "'{db}' is a path, not a tracking URI"),
])
def test_dry_run_refuses_a_mistyped_store_uri(shape, message, tmp_path, capsys):
    """`sqlit:///` once passed a dry run in silence, to fail the run itself with a KeyError."""
    db = tmp_path / "mlflow.db"
    assert main(["run", _tiny(tmp_path), "--dry-run", "--tracking-uri", shape.format(db=db)]) == 2
    err = capsys.readouterr().err
    assert message.format(db=db) in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_dry_run_reads_no_old_store_nor_empty_file_and_changes_neither(real_store, tmp_path, capsys):
    """An old store: the run would upgrade it, so the dry run says so and reads nothing (MLflow refuses
    to read it, and a dry run migrates nothing); an empty file stays empty (the run creates the store)."""
    from helpers.bad_stores import snapshot, stamped_old
    old, revision = stamped_old(real_store, tmp_path / "old.db")
    spec = _tiny(tmp_path)
    before = snapshot(old)
    assert main(["run", spec, "--dry-run", "--tracking-uri", f"sqlite:///{old}"]) == 0
    out = capsys.readouterr().out
    assert (f"note: the MLflow store {old} has an out-of-date schema (revision {revision}; this MLflow reads "
            f"") in out and f"the run upgrades it, keeping a copy at {old}.bak-{revision}" in out
    assert snapshot(old) == before
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    assert main(["run", _tiny(tmp_path), "--dry-run", "--tracking-uri", f"sqlite:///{empty}"]) == 0
    assert "1 trial;" in capsys.readouterr().out and empty.read_bytes() == b""
