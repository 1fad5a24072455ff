"""A sweep expands its spec once, and a service driver (its own process) validates the spec it is sent
once: the API's validation and expansion are tests/test_service_submit_once.py's."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import nullcontext

import pytest

import embinit.sweep.run as sweep_run

from helpers.spec_calls import count_spec_work

SPEC = {"name": "once", "tasks": ["synthetic_classification"], "inits": ["xavier", "normal"], "seeds": 2}


@pytest.fixture
def counted(monkeypatch) -> Counter:
    return count_spec_work(monkeypatch)


@pytest.mark.slow   # an MLflow store; the training replaced (no Ray)
def test_a_driver_validates_once_and_its_sweep_expands_once(tmp_path, monkeypatch, counted):
    from service.driver import ExperimentDriver
    ran = []
    monkeypatch.setattr(sweep_run, "_execute", lambda *a, **k: ran.append(a) or False)
    driver = ExperimentDriver("embinit-exp-once", SPEC, f"sqlite:///{tmp_path}/m.db", ["k"] * 4)
    for _ in range(3000):
        if driver.state.finished_at:
            break
        time.sleep(0.01)
    assert driver.state.finished_at and len(ran[0][1]) == 4  # nothing trained: "only 0 of 4 finished"
    assert counted == {"validate": 1, "plan": 1}, counted


@pytest.mark.slow
def test_an_optuna_sweep_expands_once(tmp_path, monkeypatch, counted):
    from embinit.spec import load_spec
    from embinit.sweep import optuna_search
    spec = load_spec({**SPEC, "search": {"method": "optuna", "num_samples": 2, "space": {"lr": {
        "low": 1e-4, "high": 1e-2, "log": True}}}})
    searched = []
    monkeypatch.setattr(optuna_search, "RayRuntime", lambda address, resources=None: nullcontext())
    monkeypatch.setattr(optuna_search, "_search", lambda *a: searched.append(a[-1]) or False)
    counted.clear()
    sweep_run.run_sweep(spec, tracking_uri=f"sqlite:///{tmp_path}/m.db", progress=False)
    assert [len(items) for _task, _label, items, _p, _r in searched[0]] == [2, 2]
    assert counted == {"plan": 1}, counted


def test_embinit_run_expands_the_whole_grid_once(tmp_path, monkeypatch):
    """`embinit run` checks the model sizes over one seed's trials (a size does not depend on the seed),
    then its dry run (or sweep) expands the whole grid: once, not twice."""
    import yaml

    from embinit.cli import main
    from embinit.spec import planning
    sizes = []
    plan = planning.plan
    monkeypatch.setattr(planning, "plan", lambda spec: sizes.append(len(out := plan(spec))) or out)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "seeds": 5, "mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/m.db"}}))
    assert main(["run", str(path), "--dry-run"]) == 0
    assert sizes == [2, 10], sizes   # the size check: 2 inits x 1 seed; the dry run: 2 inits x 5 seeds
