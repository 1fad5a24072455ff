"""A trial Tune gave up on before its MLflow run existed (embinit.sweep.gave_up) is a FAILED run that says
why, in MLflow's run table and in the report, not a "never started" trial that only Tune's error.txt
explains."""

from __future__ import annotations

import types

import pytest

from embinit.spec import load_spec
from embinit.sweep.gave_up import GAVE_UP, GaveUp, record
from embinit.sweep.work import units_to_run
from embinit.tracking import mlflow_store, records, run_readers
from helpers.sweep import sweep_spec_data


def _spec(tmp_path, name="gu"):
    return load_spec(sweep_spec_data(name, tmp_path, {"task": "synthetic_translation", "epochs": 2},
                                     inits=["xavier", "normal"], seeds=[0], execution={"trainer": "noop"}))


def test_the_callback_keeps_every_trial_of_the_unit_with_the_last_line_of_its_error(tmp_path):
    units, _ = units_to_run(_spec(tmp_path), set())
    err = tmp_path / "error.txt"
    err.write_text("Traceback (most recent call last):\n  File x\nIsADirectoryError: [Errno 21] Is a directory\n")
    cb = GaveUp(units)
    cb.on_trial_error(0, [], types.SimpleNamespace(config={"unit": 1}, error_file=str(err)))
    cb.on_trial_error(0, [], types.SimpleNamespace(config={}, error_file=None))   # not a unit: nothing
    assert [(item.key, why) for item, why in cb.items] == [
        (units[1].trials[0].key, "IsADirectoryError: [Errno 21] Is a directory")]


def test_only_keys_without_a_run_are_recorded(tmp_path):
    spec = _spec(tmp_path)
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    exp = mlflow_store.ensure_experiment("gu", uri)
    units, _ = units_to_run(spec, set())
    (a,), (b,) = (u.trials for u in units)
    from embinit.tracking import run_writers, trial_run
    parent = run_writers.start_parent_run(exp, uri, "h", "name: gu\n", 2, run_name="gu")
    trial_run.TrialRun.open(uri, exp, parent, a.config, a.key, a.label, a.group()).fail("boom")
    assert record(exp, uri, parent, [(a, "X: 1"), (b, "X: 2"), (b, "X: 2")]) == 1
    (rec,) = run_readers.key_records(exp, uri, b.key)
    assert (rec.status, rec.error, rec.parent_id, rec.label) == ("failed", GAVE_UP + "X: 2", parent, b.label)
    assert run_readers.key_records(exp, uri, a.key)[0].error == "boom"


@pytest.mark.slow
def test_a_trial_whose_claim_failed_is_a_failed_run_with_its_reason(ray_local, tmp_path):
    from embinit.report.rows import failure_reason
    from embinit.report.table import build_report
    from embinit.sweep import run_sweep
    from embinit.sweep.trial_folders import experiment_folder
    spec = _spec(tmp_path, "gu2")
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    exp = mlflow_store.ensure_experiment("gu2", uri)
    bad = spec.plan()[1]
    base = experiment_folder(spec.cache_dir, uri, exp)
    (base / f"{bad.key}.lock").mkdir(parents=True)   # its claim's lock cannot be opened: fails before its run
    result = run_sweep(spec, progress=False)
    assert (result.n_finished, result.n_failed) == (1, 1)
    (run,) = [r for r in mlflow_store.search_runs(exp, uri) if r.data.tags.get(records.KEY_TAG) == bad.key]
    assert run.info.status == "FAILED" and run.data.tags[records.STATUS_TAG] == "failed"
    assert run.info.run_name == f"{bad.label}-s0"
    assert run.data.tags[records.ERROR_TAG].startswith(GAVE_UP + "IsADirectoryError")
    report = build_report("gu2", uri)
    (row,) = [r for r in report.rows if r["init"] == bad.label]
    assert (row["failed"], row["never_started"]) == (1, 0)
    # the reason the report gives is Tune's error, as any failed trial's is its own
    assert list(row["failure_reasons"]) == [failure_reason(run.data.tags[records.ERROR_TAG])]
    assert failure_reason(run.data.tags[records.ERROR_TAG]).startswith("IsADirectoryError: [Errno 21]")
