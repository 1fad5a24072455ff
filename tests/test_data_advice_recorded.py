"""A trial without data says how to give it data in its caller's words, and its MLflow record keeps them:
a trial the service runs advises a spec's data_dir inside the service's data roots, one `embinit run`
runs advises `--data-dir`. The sweep is the real one (`run_sweep`, and the service's driver around it),
its units trained in this process instead of on Ray. The hub does not answer (nothing listens at
HF_ENDPOINT) and nothing is cached, so the trial's hub load fails as a worker's does when its node cannot
reach the hub; no spec check refuses it first (online, a trial fetches its data)."""

from __future__ import annotations

import time

import pytest

from embinit.tracking import mlflow_store, records

pytestmark = pytest.mark.slow  # MLflow's store setup takes a few seconds

SPEC = {"name": "no-data", "inits": ["xavier"], "seeds": [0],
        "tasks": [{"task": "sst2", "tokenizer": "whitespace", "epochs": 1, "d_model": 16, "heads": 2,
                   "layers": 1, "ff_dim": 16, "max_len": 16}],
        "mlflow": {"log_checkpoint": False, "log_plots": False}}
CLI_WORDS = "no --data-dir given and $EMBINIT_DATA_DIR not set"
API_WORDS = "no data_dir in the spec and this service's $EMBINIT_DATA_DIR not set"


@pytest.fixture
def sweep_here(tmp_path, monkeypatch):
    """A hub nobody answers, no cached copy, and the sweep's units trained in this process; the spec
    (its cache in `tmp_path`) and the MLflow store to read."""
    from ray import tune

    from embinit.sweep import run as sweep_run
    from embinit.sweep.trainable import train_unit
    from live_server import free_port

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")   # nothing listens there
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: None)
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)

    def in_process(job, units) -> bool:   # `_execute` without Ray: each unit as its Tune trial runs it
        for i in range(len(units)):
            train_unit({"unit": i}, job.shared, units, job.extra_callbacks)
        return False
    monkeypatch.setattr(sweep_run, "_execute", in_process)
    spec = {**SPEC, "cache_dir": str(tmp_path / "cache")}
    return spec, mlflow_store.resolve_uri(f"sqlite:///{tmp_path}/mlflow.db")


def _recorded_error(uri: str) -> str:
    """The one trial run's error, as MLflow keeps it."""
    exp = mlflow_store.ensure_experiment(SPEC["name"], uri)
    (run,) = [r for r in mlflow_store.search_runs(exp, uri) if records.KEY_TAG in r.data.tags]
    assert run.data.tags[records.STATUS_TAG] == "failed"
    return run.data.tags[records.ERROR_TAG]


def test_a_trial_the_service_runs_records_the_services_advice(sweep_here):
    """Found by a review: every trial gave the command line's advice, which the API rewrote when it read
    the record; MLflow's own view of a service experiment told its reader to pass `--data-dir`."""
    from service.driver import ExperimentDriver
    spec, uri = sweep_here
    driver = ExperimentDriver("embinit-exp-advice", spec, uri, [])
    deadline = time.monotonic() + 120
    while not driver.state.finished_at and time.monotonic() < deadline:
        time.sleep(0.05)
    assert driver.state.status == "failed", driver.state.error
    error = _recorded_error(uri)
    assert API_WORDS in error and "127.0.0.1 cannot be reached" in error
    assert "give it as the task's data_dir, or give the spec's data_dir a folder there holding sst2/" in error
    assert "--data-dir" not in error and "--data-dir" not in driver.state.error


def test_a_trial_the_command_line_runs_records_the_command_lines_advice(sweep_here):
    from embinit.sweep import run_sweep
    spec, uri = sweep_here
    result = run_sweep(spec, tracking_uri=uri, progress=False)
    assert result.n_failed == 1
    error = _recorded_error(uri)
    assert CLI_WORDS in error and "pass it with --data-dir (a spec's data_dir), or set EMBINIT_DATA_DIR" in error
    assert "data roots" not in error


def test_the_advice_is_the_trials_own_and_no_key_changes():
    """The caller's advice travels in the sweep's shared context, not in a trial's config: every key is
    the same whoever runs it; outside a sweep's trial the command line's advice stands."""
    import pickle

    from embinit.spec import load_spec
    from embinit.sweep.work import SweepContext
    from embinit.tasks import hub
    from service.specs import DATA_ADVICE
    shared = SweepContext("sqlite:///x.db", "1", "p", advice=DATA_ADVICE)
    assert pickle.loads(pickle.dumps(shared)).advice == DATA_ADVICE   # what Ray ships to the workers
    assert hub.current_advice() == hub.CLI_ADVICE
    with hub.advising(DATA_ADVICE):
        assert hub.current_advice() == DATA_ADVICE and hub.current_advice(hub.CLI_ADVICE) == hub.CLI_ADVICE
        keys = [p.key for p in load_spec(SPEC).plan()]
    assert hub.current_advice() == hub.CLI_ADVICE
    assert keys == [p.key for p in load_spec(SPEC).plan()]
