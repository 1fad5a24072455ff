"""The reproduction document's frame (issue 22 items 5-7): it builds from whichever experiments exist,
its "How it was run" comes from what MLflow stored for each sweep (recorded by embinit.tracking.provenance and
read back), it has a title, a date and the tracking URI, a group trained below the paper's budget gets
"not comparable at this budget" with the reason, and empty headings and all-dash tables are dropped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import embinit
from embinit.tracking import mlflow_store, provenance, records, run_writers, trial_run
from embinit.cli import main
from embinit.reproduction import Group, Inputs, Reproduction, Section
from embinit.reproduction.frame import NOT_COMPARABLE, clean, header

ROOT = Path(__file__).resolve().parents[1]


def test_command_line_as_typed():
    assert provenance.command_line(["/x/.venv/bin/embinit", "run", "a b.yaml", "epochs=2"]) == \
        "embinit run 'a b.yaml' epochs=2"
    assert provenance.command_line(["/src/embinit/__main__.py", "reproduction"]) == "embinit reproduction"
    assert provenance.command_line(["worker.py", "--x"]).startswith("run_sweep() called from worker.py --x")


def test_a_password_in_the_command_line_is_not_recorded():
    """The command tag is shown in MLflow's UI and printed in the reproduction document (committed)."""
    typed = ["/x/.venv/bin/embinit", "run", "s.yaml", "--tracking-uri", "http://me:pw1@mlflow:5000",
             "--store-uri=postgresql+psycopg://mlflow:pw2@db:5432/mlflow", "mlflow.tracking_uri=mysql://u:pw3@h/m",
             "--address", "ray://head:10001", "name=a=b"]
    line = provenance.command_line(typed)
    assert not any(pw in line for pw in ("pw1", "pw2", "pw3")), line
    assert line == ("embinit run s.yaml --tracking-uri 'http://me:***@mlflow:5000' "
                    "'--store-uri=postgresql+psycopg://mlflow:***@db:5432/mlflow' "
                    "'mlflow.tracking_uri=mysql://u:***@h/m' --address ray://head:10001 name=a=b")


def test_clean_drops_empty_headings_and_all_dash_tables():
    dash = ["| init | a | b |", "|---|---|---|", "| Xavier | — | — |", "| GloVe | — | - |"]
    full = ["| init | a | b |", "|---|---|---|", "| Xavier | 1.0 | — |"]
    sections = [Section("A", ["**Finding 1.**", "- a claim", "", "**Finding 2.**", "", "**Finding 3.**"]),
                Section("B", ["intro", "", *dash, "", *full]),
                Section("C", ["**x, y**", "", *dash]),
                # Table 2's shape: two label columns, cells such as `—, —` and `— (—)`
                Section("D", ["| group | init | min, max | mean (σ) | PE σ |", "|---|---|---|---|---|",
                              "| multi30k | GloVe_Shuffled | —, — | — (—) | — |"])]
    a, b = clean(sections)
    assert a.lines == ["**Finding 1.**", "- a claim"]
    assert b.lines == ["intro", "", "", *full] and [s.title for s in clean(sections)] == ["A", "B"]


def _trial(uri, exp, parent, key, label, seed, bleu, loss, epochs):
    cfg = {"task": "multi30k", "init": label.lower(), "seed": seed, "d_model": 32, "heads": 4, "layers": 3,
           "epochs": epochs, "train_embeddings": True, "pos_encoding": True}
    run = trial_run.TrialRun.open(uri, exp, parent, cfg, key, label, {"axes": {}, "point": {}})
    mlflow_store.client(uri).set_tag(run.run_id, records.DEVICE_TAG, "cpu")
    run.finish({"status": "finished", "history": [], "test": {"test/bleu": bleu}, "best": {"val/loss": loss},
                "best_epoch": epochs}, [])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """`offline-multi30k-glove50` (one of the offline preset's experiments) at 2 epochs, D = 32: one sweep
    run recorded with its provenance, as `embinit run` records it."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    exp = mlflow_store.ensure_experiment("offline-multi30k-glove50", uri)
    parent = run_writers.start_parent_run(exp, uri, "f" * 16, "name: offline-multi30k-glove50\ntasks: [multi30k]\n"
                                       "inits: [xavier, glove]\nseeds: 3\n", 6)
    tags = provenance.collect(["/v/bin/embinit", "run", "tune_configs/offline/multi30k_glove50.yaml", "epochs=2"])
    provenance.record(parent, uri, tags)
    for seed in range(3):
        _trial(uri, exp, parent, f"x{seed}", "Xavier", seed, 20.0 + seed, 3.0, 2)
        _trial(uri, exp, parent, f"g{seed}", "GloVe", seed, 15.0 + seed, 3.1, 2)
    run_writers.end_parent_run(parent, uri, "FINISHED", None, {})
    return uri, parent, tags


def test_a_training_subset_is_not_the_paper_budget():
    from types import SimpleNamespace
    from embinit.reproduction.frame import budget_gap
    trial = SimpleNamespace(task="multi30k", config={"epochs": 20, "d_model": 300, "layers": 3,
                                                     "max_train_examples": 4000})
    rep, g = SimpleNamespace(data={"e": ([trial],)}), SimpleNamespace(experiment="e", task="multi30k",
                                                                      paper_source="GloVe")
    assert budget_gap(rep, g) == "trained on 4000 examples, paper the full training set"
    trial.config["epochs"] = 4
    assert budget_gap(rep, g) == "4 of the paper's 20 epochs; trained on 4000 examples, paper the full training set"
    trial.config.update(epochs=20, max_train_examples=None)
    assert budget_gap(rep, g) is None


@pytest.mark.slow   # an MLflow store
def test_provenance_round_trips(store):
    uri, parent, tags = store
    how = provenance.read(mlflow_store.client(uri).get_run(parent).data.tags)
    assert how["command"] == "embinit run tune_configs/offline/multi30k_glove50.yaml epochs=2"
    assert how["machine"] == provenance.machine() and provenance.cpu_model() in how["machine"]
    assert how["version"] == embinit.__version__
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    if (ROOT / ".git").exists() and head:
        assert how["commit"].startswith(head.strip())
    run = mlflow_store.client(uri).create_run(mlflow_store.experiment_id("offline-multi30k-glove50", uri))
    assert provenance.read(mlflow_store.client(uri).get_run(run.info.run_id).data.tags)["command"] == "not recorded"


@pytest.mark.slow   # an MLflow store; run_sweep with its training replaced (no Ray)
def test_run_sweep_records_how_it_was_run(tmp_path, monkeypatch):
    import embinit.sweep.run as sweep_run
    monkeypatch.setattr(sweep_run, "_execute", lambda *a, **k: False)
    monkeypatch.setattr(sys, "argv", ["/v/bin/embinit", "run", "s.yaml", "seeds=1"])
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = sweep_run.run_sweep({"name": "p", "tasks": ["synthetic_classification"], "inits": ["xavier"],
                                  "seeds": 1}, tracking_uri=uri, progress=False)
    how = provenance.read(mlflow_store.client(uri).get_run(result.parent_run_id).data.tags)
    assert how["command"] == "embinit run s.yaml seeds=1" and how["version"] == embinit.__version__
    assert how["machine"] == provenance.machine()


@pytest.mark.slow
def test_the_document_says_how_it_was_run_and_what_its_budget_allows(store, tmp_path, capsys):
    uri, parent, tags = store
    out = tmp_path / "repro.md"
    # the README's command: no GPU experiments here, so it reads the offline ones (item 5)
    assert main(["reproduction", "--tracking-uri", uri, "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Reproduction: Kim, Balasubramanian & Kang")
    assert "`embinit reproduction --inputs offline` on 20" in text and f"tracking store `{uri}`" in text
    how = text[text.index("## How it was run"):]
    assert "command: `embinit run tune_configs/offline/multi30k_glove50.yaml epochs=2`" in how
    assert f"machine: {provenance.machine()}; devices: cpu (6 trials)" in how
    assert f"embinit {embinit.__version__}, commit `{tags[provenance.COMMIT_TAG]}`" in how
    assert "6 trials planned, 6 trained in this sweep" in how and "```yaml\nname: offline-multi30k-glove50" in how
    assert "$ADDR" not in text and "2-CPU Ray cluster" not in text
    # 2 of 20 epochs at D = 32: the findings are not read as the paper's claims (item 7)
    finding = next(ln for ln in text.splitlines() if ln.startswith("- raw GloVe does worse than Xavier"))
    assert f"**{NOT_COMPARABLE}** (2 of the paper's 20 epochs; D = 32, paper 300)" in finding
    assert "GloVe − Xavier = -5.00 (paired t" in finding
    assert "**does not reproduce**" not in text and "**reproduces**" not in text
    # no empty headings: the offline preset's SST-2 group has no runs, Finding 2 has nothing measured
    assert "**Finding 2.**" not in text and "**Finding 1.**" in text
    rep = Reproduction(uri, Inputs(groups=(Group("offline-multi30k-glove50", "multi30k", "GloVe", "GloVe",
                                                 "a.yaml"),), analogy_experiment="none"))
    rep.build()
    assert all(x["verdict"] == NOT_COMPARABLE and x["measured"] for x in rep.exports["findings"]
               if "budget" in x and x["n"] != (0, 0))
    assert header(rep)[0].startswith("Generated by `embinit reproduction` on ")


@pytest.mark.slow
def test_no_reproduction_experiments_names_the_choices(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow_store.ensure_experiment("quickstart", uri)
    assert main(["reproduction", "--tracking-uri", uri, "--out", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert "which holds ['quickstart']" in err and "--inputs gpu reads gpu-multi30k-glove50" in err
    assert "--inputs offline reads offline-multi30k-glove50" in err and not (tmp_path / "r.md").exists()


@pytest.mark.slow
def test_a_store_with_only_the_studies_beyond_the_paper_makes_a_document(tmp_path, capsys):
    """The CPU studies of issue 23 (dose-response, OOV rules) are reproduction experiments too: a store
    that holds only them renders, the paper's sections marked not run, instead of exiting 2."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow_store.ensure_experiment("offline-dose-response-sigma", uri)
    out = tmp_path / "r.md"
    assert main(["reproduction", "--tracking-uri", uri, "--out", str(out)]) == 0, capsys.readouterr().err
    text = out.read_text()
    assert "--inputs offline" in text and "not in the store yet: `offline-multi30k-glove50`" in text
    assert "Experiments read: `offline-dose-response-sigma`;" in text


def test_a_rerun_seed_counts_once_in_the_reproduction():
    """A spec run again under new keys (here: more epochs) keeps its old runs; Table 1 counted 8 trials
    for 4 seeds. One per seed, the newest, as the report and the findings read them."""
    from embinit.reproduction.data import ReproductionData
    from embinit.reproduction.inputs import Group, Trial
    trials = [Trial(f"{e}-{s}", f"{e}-{s}", "multi30k", "GloVe", "finished", {"seed": s, "epochs": e}, {},
                    {"test/bleu": float(e + s)}, s, start_ms=e * 10 + s) for e in (10, 20) for s in range(4)]
    rep = ReproductionData.__new__(ReproductionData)
    rep.data = {"e": (trials, [])}
    chosen = rep.main_trials(Group("e", "multi30k", "GloVe", "GloVe", "s.yaml"), "P")
    assert sorted(t.config["seed"] for t in chosen) == [0, 1, 2, 3]
    assert {t.config["epochs"] for t in chosen} == {20}


def test_a_ray_workers_secret_flags_are_not_recorded():
    """A service driver runs in a Ray worker, whose command line (`run_sweep() called from ...`) holds
    `--redis-password=...` on a cluster with a Redis password; a secret flag's next word is masked too."""
    argv = ["default_worker.py", "--node-ip-address=10.0.0.2", "--redis-password=s3cret1", "--token", "s3cret2",
            "--redis-address=10.0.0.1:6379", "--api-key=s3cret3"]
    line = provenance.command_line(argv)
    assert not any(s in line for s in ("s3cret1", "s3cret2", "s3cret3")), line
    assert "--redis-password=***" in line and "--token '***'" in line and "--redis-address=10.0.0.1:6379" in line
