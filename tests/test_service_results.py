"""`GET /experiments/{id}/results` over a real (temporary SQLite) MLflow store, as an API user meets
issue 22: each init compared with Xavier or `?baseline=`, a 422 naming the closest init for a misspelled
baseline, and what a partial experiment never finished. The cluster is the in-process fake; the trial
runs are written the way the sweep writes them."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from embinit.tracking import mlflow_store, records, trial_run
from embinit.spec import load_spec
from service.fakes import FakeCluster, FakeRunner
from service.main import create_app
from service.settings import Settings

pytestmark = pytest.mark.slow  # MLflow's store setup takes a few seconds

SPEC = {"name": "api-results", "tasks": ["synthetic_classification"], "inits": ["xavier", "normal"], "seeds": 2}
ACC = [0.50, 0.60, 0.70]   # Xavier seed 0, Xavier seed 1, Normal seed 0; Normal seed 1 never ran


@pytest.fixture
def client(tmp_path):
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        data_roots=[tmp_path], pretrained_roots=[tmp_path], refresh_interval_s=0.0)
    with TestClient(create_app(settings, runner=FakeRunner(FakeCluster()))) as c:
        yield c, mlflow_store.resolve_uri(settings.tracking_uri)


def _write_runs(uri: str) -> None:
    from mlflow.entities import Metric
    exp = mlflow_store.ensure_experiment(SPEC["name"], uri)
    client = mlflow_store.client(uri)
    for p, acc in zip(load_spec(SPEC).plan(), ACC):
        run = trial_run.TrialRun.open(uri, exp, None, p.config, p.key, p.label, {"axes": {}, "point": {}})
        now = int(time.time() * 1000)
        client.log_batch(run.run_id, metrics=[Metric("best/val/acc", acc, now, 0), Metric("best_epoch", 1, now, 0)])
        client.set_tag(run.run_id, records.STATUS_TAG, "finished")
        client.set_terminated(run.run_id, "FINISHED")


def test_results_compare_inits_and_say_what_never_finished(client):
    c, uri = client
    exp_id = c.post("/experiments", json=SPEC).json()["id"]
    _write_runs(uri)
    data = c.get(f"/experiments/{exp_id}/results").json()
    rows = {r["init"]: r for r in data["rows"]}
    normal = rows["Normal"]["vs_baseline"]
    assert (data["baseline"], normal["baseline"], normal["test"], normal["pairs"]) == ("Xavier", "Xavier",
                                                                                      "paired t", 1)
    assert normal["diff"] == pytest.approx(0.2) and normal["verdict"] == "inconclusive"
    assert data["completeness"]["unfinished"] == 1 and data["completeness"]["planned"] == 4
    md = c.get(f"/experiments/{exp_id}/results", params={"format": "markdown"}).text
    assert "Difference from Xavier" in md and "1 of 4 planned trials never finished" in md
    other = c.get(f"/experiments/{exp_id}/results", params={"baseline": "Normal"}).json()
    assert {r["init"]: r for r in other["rows"]}["Xavier"]["vs_baseline"]["diff"] == pytest.approx(-0.2)
    bad = c.get(f"/experiments/{exp_id}/results", params={"baseline": "nromal"})
    assert bad.status_code == 422
    assert bad.json()["detail"] == [{"loc": "query.baseline", "msg": "baseline 'nromal' is not an init of this "
                                     "experiment; choose from ['Normal', 'Xavier']; did you mean 'Normal'?"}]


def test_the_cli_client_passes_the_baseline(tmp_path, capsys, monkeypatch):
    import json

    from live_server import serving

    from embinit.cli import main
    for name in ("EMBINIT_API_URL", "EMBINIT_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(_env_file=None, database_url=f"sqlite:///{tmp_path}/state.db",
                        tracking_uri=f"sqlite:///{tmp_path}/m.db", data_roots=[tmp_path],
                        pretrained_roots=[tmp_path], refresh_interval_s=0.0)
    with serving(create_app(settings, runner=FakeRunner(FakeCluster()))) as base:
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps(SPEC))
        assert main(["experiments", "submit", str(spec), "--url", base]) == 0
        exp_id = capsys.readouterr().out.split("submitted: ")[1].split()[0]
        _write_runs(mlflow_store.resolve_uri(settings.tracking_uri))
        assert main(["experiments", "results", exp_id, "--baseline", "Normal", "--format", "json", "--url", base]) == 0
        rows = {r["init"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
        assert rows["Xavier"]["vs_baseline"]["baseline"] == "Normal"
        assert main(["experiments", "results", exp_id, "--baseline", "Nrmal", "--url", base]) == 2
        assert capsys.readouterr().err.endswith(": 422 baseline: baseline 'Nrmal' is not an init of this experiment; "
                                                "choose from ['Normal', 'Xavier']; did you mean 'Normal'?\n")


OPTUNA = {"name": "api-optuna", "tasks": ["synthetic_classification"], "inits": ["xavier", "normal"], "seeds": 2,
          "search": {"method": "optuna", "num_samples": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}}}


def _optuna_sweeps(c, uri, planned: int, other_planned: int):
    """POST the Optuna spec; its MLflow experiment with the experiment's own sweep run (`planned` trials)
    and another spec's (`other_planned`): (the API's experiment id, the MLflow experiment id, mine, other)."""
    from embinit.tracking import run_writers
    from service.db import Experiment
    exp_id = c.post("/experiments", json=OPTUNA).json()["id"]
    with c.app.state.sessions() as s:
        spec_hash = s.get(Experiment, exp_id).spec_hash
    exp = mlflow_store.ensure_experiment(OPTUNA["name"], uri)
    mine = run_writers.start_parent_run(exp, uri, spec_hash, "{}", planned)
    other = run_writers.start_parent_run(exp, uri, "another-spec", "{}", other_planned)
    return exp_id, exp, mine, other


def _finished_trial(uri, exp, parent, cfg, key, label, point, acc):
    """A finished trial run under `parent` with `best/val/acc` = acc; its run id."""
    from mlflow.entities import Metric
    run = trial_run.TrialRun.open(uri, exp, parent, cfg, key, label, {"axes": {}, "point": point})
    now = int(time.time() * 1000)
    mlflow_store.client(uri).log_batch(run.run_id, metrics=[Metric("best/val/acc", acc, now, 0)])
    mlflow_store.client(uri).set_tag(run.run_id, records.STATUS_TAG, "finished")
    mlflow_store.client(uri).set_terminated(run.run_id, "FINISHED")
    return run.run_id


def test_optuna_results_hold_only_the_trials_of_the_experiments_own_sweeps(client):
    """Another spec's runs share the MLflow experiment's name: an Optuna search's table must not pool them."""
    c, uri = client
    exp_id, exp, mine, other = _optuna_sweeps(c, uri, 2, 2)
    for parent, acc, tag in ((mine, 0.6, "m"), (other, 0.1, "o")):
        for seed in (0, 1):
            cfg = {"task": "synthetic_classification", "init": "xavier", "seed": seed, "lr": 1e-3}
            _finished_trial(uri, exp, parent, cfg, f"{tag}{seed}", "Xavier", {"lr": 1e-3}, acc + seed / 100)
    (row,) = c.get(f"/experiments/{exp_id}/results").json()["rows"]
    assert (row["init"], row["n"], row["mean"]) == ("Xavier", 2, pytest.approx(0.605))


def test_an_optuna_searchs_trial_table_lists_the_trials_it_drew(client):
    """An Optuna search draws each trial's config (so its key) at run time: the table listed its planned
    points x seeds instead, every one `pending` with no run, also once the search had finished."""
    c, uri = client
    exp_id, exp, mine, other = _optuna_sweeps(c, uri, 8, 1)
    drawn = {}
    for parent, init, label, seed, lr in [(mine, "xavier", "Xavier", s, lr) for s in (0, 1) for lr in (1e-3, 2e-3)] \
            + [(mine, "normal", "Normal", 0, 3e-3), (other, "xavier", "Xavier", 0, 5e-3)]:
        cfg = {"task": "synthetic_classification", "init": init, "seed": seed, "lr": lr}
        key = f"{label}-{seed}-{lr}"
        drawn[key] = _finished_trial(uri, exp, parent, cfg, key, label, {"lr": lr}, 0.5)
    page = c.get(f"/experiments/{exp_id}/trials").json()
    rows = [(t["label"], t["seed"], t["status"], t["config"].get("lr"), t["run_id"]) for t in page["items"]]
    assert rows == [("Xavier", 0, "finished", 1e-3, drawn["Xavier-0-0.001"]),
                    ("Xavier", 0, "finished", 2e-3, drawn["Xavier-0-0.002"]),
                    ("Xavier", 1, "finished", 1e-3, drawn["Xavier-1-0.001"]),
                    ("Xavier", 1, "finished", 2e-3, drawn["Xavier-1-0.002"]),
                    ("Normal", 0, "finished", 3e-3, drawn["Normal-0-0.003"]),
                    ("Normal", 1, "pending", None, None)]   # its draws still to come; another spec's run left out
    assert page["total"] == 6
    # each drawn trial's point as its run holds it (`embinit.group`); one not drawn yet has none
    assert [t["point"] for t in page["items"]] == [{"lr": 1e-3}, {"lr": 2e-3}, {"lr": 1e-3}, {"lr": 2e-3},
                                                   {"lr": 3e-3}, {}]


def test_a_failed_trial_says_why_in_the_trial_table(client):
    """A researcher whose experiment failed reads each trial's reason in `/trials`, not only in MLflow."""
    c, uri = client
    exp_id = c.post("/experiments", json=SPEC).json()["id"]
    exp = mlflow_store.ensure_experiment(SPEC["name"], uri)
    p = load_spec(SPEC).plan()[0]
    run = trial_run.TrialRun.open(uri, exp, None, p.config, p.key, p.label, {"axes": {}, "point": {}})
    run.fail("Traceback (most recent call last):\nOSError: /data/de.txt: no such file")
    items = c.get(f"/experiments/{exp_id}/trials").json()["items"]
    assert items[0]["status"] == "failed"
    assert items[0]["error"] == "Traceback (most recent call last):\nOSError: /data/de.txt: no such file"
    assert [t["error"] for t in items[1:]] == [None, None, None]   # pending trials have no error


def test_a_trial_without_data_is_advised_in_the_services_terms(client):
    """A trial reads the hub where a spec gives no data; when that fails, a record written before trials
    were told their caller (or by `embinit run` into this store) advises the command line's `--data-dir`,
    which a client of the API cannot pass: the trial table and the report say it as a spec sent here gives
    a task its data (the MLflow record keeps its own words). A trial the service runs now writes these
    words itself (tests/test_data_advice_recorded.py)."""
    from embinit.tasks.hub import no_data_error
    c, uri = client
    exp_id = c.post("/experiments", json=SPEC).json()["id"]
    exp = mlflow_store.ensure_experiment(SPEC["name"], uri)
    p = load_spec(SPEC).plan()[0]
    run = trial_run.TrialRun.open(uri, exp, None, p.config, p.key, p.label, {"axes": {}, "point": {}})
    error = no_data_error("sst2", {"train": "train"}, "no --data-dir given and $EMBINIT_DATA_DIR not set",
                          "ConnectionError: offline")
    assert "pass it with --data-dir" in str(error)   # the trial's own words
    run.fail(f"EmbinitError: {error}")
    shown = c.get(f"/experiments/{exp_id}/trials").json()["items"][0]["error"]
    assert shown.startswith("EmbinitError: sst2: no local data (no data_dir in the spec and this service's "
                            "$EMBINIT_DATA_DIR not set) and the Hugging Face dataset")
    assert "give it as the task's data_dir, or give the spec's data_dir a folder there holding sst2/ (needs: " in shown
    assert "--data-dir" not in shown and "--data-dir" not in c.get(f"/experiments/{exp_id}/results").text


def test_a_latex_table_of_an_unfinished_experiment_says_so(client):
    """The LaTeX table goes into a paper as it is: one read while trials are missing must say so in the
    table itself (caption and a comment line), as the markdown does; a complete one says nothing."""
    c, uri = client
    exp_id = c.post("/experiments", json=SPEC).json()["id"]
    _write_runs(uri)   # Normal seed 1 never ran
    tex = c.get(f"/experiments/{exp_id}/results", params={"format": "latex"}).text
    note = "Incomplete: 1 of 4 planned trials have no result (1 never started)."
    assert tex.startswith(f"% {note}\n") and f"{note}}}" in tex.split("\\caption{")[1]
    exp = mlflow_store.ensure_experiment(SPEC["name"], uri)
    p = load_spec(SPEC).plan()[3]
    run = trial_run.TrialRun.open(uri, exp, None, p.config, p.key, p.label, {"axes": {}, "point": {}})
    mlflow_store.client(uri).set_tag(run.run_id, records.STATUS_TAG, "finished")
    mlflow_store.client(uri).set_terminated(run.run_id, "FINISHED")
    c.app.state.runner.advance(f"embinit-exp-{exp_id}", "succeeded", finished=4)
    assert c.get(f"/experiments/{exp_id}").json()["status"] == "succeeded"
    tex = c.get(f"/experiments/{exp_id}/results", params={"format": "latex"}).text
    assert "Incomplete" not in tex and tex.startswith("% embinit report api-results")


def test_the_trial_table_s_statuses_are_the_documented_ones(client):
    """A script that counts `status == "finished"` must know a diverged trial is its own status (a finished
    run with no number) and a cancelled one too: the schema lists every status the table can show, and a
    cancelled trial says why like a failed one."""
    c, uri = client
    exp_id = c.post("/experiments", json=SPEC).json()["id"]
    exp = mlflow_store.ensure_experiment(SPEC["name"], uri)
    plan = load_spec(SPEC).plan()
    runs = [trial_run.TrialRun.open(uri, exp, None, p.config, p.key, p.label, {"axes": {}, "point": {}})
            for p in plan[:3]]
    mlflow_store.client(uri).set_tag(runs[0].run_id, records.STATUS_TAG, "diverged")
    mlflow_store.client(uri).set_terminated(runs[0].run_id, "FINISHED")
    runs[1].fail("the experiment cancelled", status="KILLED")
    items = c.get(f"/experiments/{exp_id}/trials").json()["items"]
    assert [t["status"] for t in items] == ["diverged", "cancelled", "running", "pending"]
    assert [t["error"] for t in items] == [None, "the experiment cancelled", None, None]
    schema = c.app.openapi()["components"]["schemas"]["Trial"]["properties"]["status"]
    assert set(schema["enum"]) == {"pending", *records.STATUS_RANK}


def test_the_trial_table_names_each_trial_s_run_and_its_grid_point(client):
    """Found in an acceptance run: a researcher scripting against `/trials` had each trial's config, but
    not what the MLflow UI and the report show of it: its run's name and its axes' and search point's
    values (the point only inside `config`). Each item now has them; a trial with no run has its planned
    point and no run name."""
    c, uri = client
    spec = {**SPEC, "name": "api-grid", "inits": ["xavier"], "seeds": 1, "axes": {"pos_encoding": [False]},
            "search": {"method": "grid", "space": {"lr": [1e-3, 2e-3]}}}
    exp_id = c.post("/experiments", json=spec).json()["id"]
    exp = mlflow_store.ensure_experiment(spec["name"], uri)
    first, second = load_spec(spec).plan()
    run = trial_run.TrialRun.open(uri, exp, None, first.config, first.key, first.label,
                                  {"axes": first.axes, "point": first.point})   # as the sweep's worker opens it
    items = c.get(f"/experiments/{exp_id}/trials").json()["items"]
    assert [(t["run_name"], t["axes"], t["point"]) for t in items] == [
        ("Xavier-s0 pos_encoding=False,lr=0.001", {"pos_encoding": False}, {"lr": 1e-3}),
        (None, {"pos_encoding": False}, {"lr": 2e-3})]   # still pending: no run, its planned point
    assert items[0]["run_name"] == mlflow_store.client(uri).get_run(run.run_id).info.run_name
    assert {"axes", "point", "run_name"} <= set(c.app.openapi()["components"]["schemas"]["Trial"]["properties"])
