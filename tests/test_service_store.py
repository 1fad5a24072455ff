"""`service.store.ResultStore` on a real (temporary SQLite) MLflow store: trial rows, counts, the report,
and its cache. Runs are written the way the sweep writes them (`embinit.tracking.trial_run.TrialRun`)."""

from __future__ import annotations

import json
import time

import pytest

from embinit.tracking import mlflow_store, records, trial_run
from embinit.errors import EmbinitError
from embinit.spec import load_spec
from service.db import Experiment, utcnow
from service.experiment_runs import count_trial_states
from service.state import settle_counts
from service.store import ResultStore

pytestmark = pytest.mark.slow  # MLflow's store setup takes a few seconds

SPEC = {"name": "store-test", "tasks": ["synthetic_classification"], "inits": ["xavier", "normal"], "seeds": 2}


def _write(uri: str, spec, statuses: dict[int, str]) -> list[str]:
    """One run per planned trial index in `statuses` (finished | failed | running)."""
    from mlflow.entities import Metric
    plan = spec.plan()
    exp_id = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    client = mlflow_store.client(uri)
    for i, status in statuses.items():
        p = plan[i]
        run = trial_run.TrialRun.open(uri, exp_id, None, p.config, p.key, p.label, {"axes": {}, "point": {}})
        if status == "finished":
            now = int(time.time() * 1000)
            client.log_batch(run.run_id, metrics=[Metric("best/val/acc", 0.5 + i / 10, now, 0),
                                                  Metric("best_epoch", 2, now, 0)])
            client.set_tag(run.run_id, records.STATUS_TAG, "finished")
            client.set_terminated(run.run_id, "FINISHED")
        elif status == "failed":
            run.fail("ValueError: boom")
    return [p.key for p in plan]


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory):
    # One store for the module (creating MLflow's schema takes seconds); each test has its experiment.
    return mlflow_store.resolve_uri(f"sqlite:///{tmp_path_factory.mktemp('store')}/mlflow.db")


@pytest.fixture
def setup(mlflow_uri, request):
    uri = mlflow_uri
    spec = load_spec({**SPEC, "name": request.node.name.replace("[", "-").replace("]", "")[:60]})
    exp = Experiment(id="e1", name=spec.name, spec=spec.canonical(), spec_hash=spec.spec_hash(),
                     trial_keys=[p.key for p in spec.plan()], n_trials=4, status="running", counts={},
                     tracking_uri=uri, mlflow_experiment=spec.experiment_name(), created_at=utcnow(),
                     updated_at=utcnow())
    return uri, spec, exp


def test_nothing_run_yet(setup):
    uri, spec, exp = setup
    store = ResultStore(uri)
    assert count_trial_states(uri, exp.mlflow_experiment, exp.trial_keys) == {"pending": 4, "running": 0, "finished": 0,
                                                                 "failed": 0, "reused": 0}
    trials = store.trials(exp)
    assert [t["status"] for t in trials] == ["pending"] * 4
    assert trials[0]["config"]["init"] == "xavier" and trials[0]["label"] == "Xavier"  # from the plan
    assert json.loads(store.report(exp)["json"])["rows"] == []
    assert store.experiment_id(exp) is None


def test_a_cancelled_experiments_unrun_trials_read_never_started(setup):
    # what the experiment's counts call cancelled (state.settle_counts), each trial row says too: a trial a
    # cancel left without a run will not start, so it is no longer `pending`
    uri, spec, exp = setup
    _write(uri, spec, {0: "finished", 1: "failed"})
    exp.status = "cancelled"
    trials = ResultStore(uri).trials(exp)
    assert [t["status"] for t in trials] == ["finished", "failed", "cancelled", "cancelled"]
    assert [t["error"] for t in trials[2:]] == ["never started: the experiment was cancelled"] * 2
    assert trials[0]["error"] is None


def test_a_failed_experiments_unrun_trials_read_never_started_and_count_as_cancelled(setup):
    # a failed experiment starts nothing more either: its trials without a run are not `pending` (which
    # promises a run) nor `failed` (they never ran): they read cancelled, and the experiment's counts
    # (state.settle_counts) say the same; the trial that ran and failed stays failed
    uri, spec, exp = setup
    _write(uri, spec, {0: "finished", 1: "failed"})
    exp.status = "failed"
    store = ResultStore(uri)
    trials = store.trials(exp)
    assert [t["status"] for t in trials] == ["finished", "failed", "cancelled", "cancelled"]
    assert [t["error"] for t in trials[1:]] == ["ValueError: boom"] + ["never started: the experiment failed"] * 2
    counts = settle_counts(exp.status, store.counts(exp), exp.n_trials)
    assert counts["pending"] == counts["running"] == 0   # the finished run: reused here
    assert counts["failed"] == 1 and counts["cancelled"] == 2


def test_trials_counts_and_report(setup):
    uri, spec, exp = setup
    keys = _write(uri, spec, {0: "finished", 1: "finished", 2: "failed", 3: "running"})
    store = ResultStore(uri)
    counts = count_trial_states(uri, exp.mlflow_experiment, keys, reused={keys[0]})
    assert counts == {"pending": 0, "running": 1, "finished": 1, "failed": 1, "reused": 1}
    trials = {t["key"]: t for t in store.trials(exp)}
    assert trials[keys[0]]["status"] == "finished" and trials[keys[0]]["best_metric"] == pytest.approx(0.5)
    assert trials[keys[0]]["metric"] == "best/val/acc" and trials[keys[0]]["run_id"]
    assert trials[keys[2]]["status"] == "failed" and trials[keys[3]]["status"] == "running"
    report = store.report(exp)
    rows = {r["init"]: r for r in json.loads(report["json"])["rows"]}
    assert rows["Xavier"]["n"] == 2 and rows["Xavier"]["mean"] == pytest.approx(0.55)
    assert "Xavier" in report["markdown"] and report["csv"].startswith("task,init")
    assert "\nXavier & \\textbf{55.00} (7.07)" in report["latex"]   # the same rows as a table for a paper
    assert store.experiment_id(exp) == mlflow_store.experiment_id(spec.name, uri)


def test_a_later_finished_run_beats_an_earlier_failure(setup):
    uri, spec, exp = setup
    keys = _write(uri, spec, {0: "failed"})
    _write(uri, spec, {0: "finished"})
    assert count_trial_states(uri, exp.mlflow_experiment, keys)["finished"] == 1
    assert ResultStore(uri).trials(exp)[0]["status"] == "finished"


def test_cache_is_keyed_by_the_experiments_last_update(setup):
    uri, spec, exp = setup
    store = ResultStore(uri, live_cost_factor=0)   # every state change is built again at once
    first = store.report(exp)
    _write(uri, spec, {0: "finished"})
    assert store.report(exp) is first            # unchanged experiment: served from the cache
    exp.updated_at = utcnow()
    assert json.loads(store.report(exp)["json"])["rows"]  # a state change shows the new run


def test_a_running_experiment_is_rebuilt_no_sooner_than_its_build_cost_allows(setup, monkeypatch):
    """At 10,000 trials a build takes about a second; rebuilt on every 2-second refresh, the API took the
    CPU the trials ran on. A running experiment's last build is served for `live_cost_factor` x its
    build time, then the next state change is built (one read of the runs for the table and the
    report); a finished experiment's state is final and always shown."""
    import service.store as store_module
    uri, spec, exp = setup
    _write(uri, spec, {0: "finished"})
    reads = []
    real = store_module.chosen_records

    def slow_chosen(*a):
        reads.append(1)
        time.sleep(0.05)
        return real(*a)
    monkeypatch.setattr(store_module, "chosen_records", slow_chosen)
    store = ResultStore(uri, live_cost_factor=4.0)
    first = store.trials(exp)
    store.report(exp)
    assert len(reads) == 1                        # the table and the report share one read of the runs
    _write(uri, spec, {1: "finished"})
    exp.updated_at = utcnow()
    assert store.trials(exp) is first and len(reads) == 1    # younger than 4 x its build: served as it was
    # wait out 4 x the build time the store measured (not a fixed 0.25 s: a loaded machine builds slower)
    built_at, cost = next((v[1], v[2]) for k, v in store._live.items() if k[0] == "trials")
    time.sleep(max(0.0, built_at + 4.0 * cost - time.monotonic()) + 0.05)
    assert sum(t["status"] == "finished" for t in store.trials(exp)) == 2 and len(reads) == 2
    exp.status, exp.updated_at = "succeeded", utcnow()
    _write(uri, spec, {2: "finished"})
    assert sum(t["status"] == "finished" for t in store.trials(exp)) == 3   # final: no staleness allowed
    kept = [k for k in store._cache if k[0] == "trials"]
    assert kept == [("trials", exp.id, exp.updated_at)]    # older states of the table are let go


def test_behind_a_tracking_server_the_runs_are_read_from_its_database(setup, monkeypatch):
    """EMBINIT_TRACKING_READ_URI: trials write through an `mlflow server`, the API reads the database
    behind it (a read of 10,000 runs through the server outlasts the API's MLflow timeout). Nothing
    here may contact the server: it is not there (a call to it would fail at once)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    uri, spec, exp = setup
    _write(uri, spec, {0: "finished", 1: "failed"})
    server = "http://127.0.0.1:1"
    exp.tracking_uri = server
    store = ResultStore(server, read_uri=uri, live_cost_factor=0)
    assert [t["status"] for t in store.trials(exp)] == ["finished", "failed", "pending", "pending"]
    assert store.counts(exp)["failed"] == 1 and store.experiment_id(exp) is not None
    assert json.loads(store.report(exp)["json"])["rows"]
    from mlflow.exceptions import MlflowException
    with pytest.raises(MlflowException, match="127.0.0.1"):   # without it the read goes to the (absent) server
        ResultStore(server).trials(exp)


def test_report_compares_with_a_baseline_and_says_what_never_finished(setup):
    uri, spec, exp = setup
    keys = _write(uri, spec, {0: "finished", 1: "finished", 2: "finished"})  # Normal seed 1 never ran
    store = ResultStore(uri)
    data = json.loads(store.report(exp)["json"])
    rows = {r["init"]: r for r in data["rows"]}
    normal = rows["Normal"]["vs_baseline"]        # Normal seed 0 (0.7) against Xavier seed 0 (0.5)
    assert (data["baseline"], normal["test"], normal["pairs"]) == ("Xavier", "paired t", 1)
    assert normal["diff"] == pytest.approx(0.2) and normal["verdict"] == "inconclusive"  # one pair
    assert data["completeness"]["unfinished"] == 1
    assert data["completeness"]["unfinished_by_status"] == {"never started": 1}
    assert "**Incomplete: 1 of 4 planned trials never finished** (1 never started)." in store.report(exp)["markdown"]
    other = json.loads(store.report(exp, "Normal")["json"])
    assert other["baseline"] == "Normal" and {r["init"]: r for r in other["rows"]}["Xavier"]["vs_baseline"][
        "diff"] == pytest.approx(-0.2)
    with pytest.raises(EmbinitError, match=r"baseline 'normall' .*did you mean 'Normal'\?"):
        store.report(exp, "normall")
    assert not store._building            # the failed build left no lock behind
    assert keys


def test_nothing_run_yet_says_every_trial_is_unfinished(setup):
    uri, spec, exp = setup
    data = json.loads(ResultStore(uri).report(exp)["json"])
    assert data["completeness"]["unfinished_by_status"] == {"never started": 4}
    assert [x["init"] for x in data["completeness"]["inits_without_results"]] == ["Normal", "Xavier"]


def test_a_baseline_the_experiment_does_not_plan_is_refused_before_anything_ran(setup):
    """A script that asks for `?baseline=Glove` right after the submit must get the 422 it gets later,
    not a 200 table "compared with Glove" that turns into a 422 once the first trial finishes."""
    from embinit.report.baseline import UnknownBaseline
    uri, spec, exp = setup
    with pytest.raises(UnknownBaseline, match=r"'Glove' is not an init of this experiment; choose from "
                                              r"\['Normal', 'Xavier'\]"):
        ResultStore(uri).report(exp, "Glove")
    assert json.loads(ResultStore(uri).report(exp, "Normal")["json"])["baseline"] == "Normal"
