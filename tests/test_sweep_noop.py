"""The no-work trainer (`execution.trainer: noop`, embinit.sweep.noop): its trials go through the real
sweep (Tune, claims, MLflow runs under their real keys, dedup) and the report reads them like trained
ones, with the task's real metric names; nothing trains."""

from __future__ import annotations

import pytest

from embinit.tracking import mlflow_store, records
from embinit.config import TrialConfig
from embinit.task_registry import TASKS, loss_metric, primary_metric, reported_metrics
from embinit.spec import SpecError, load_spec
from embinit.sweep.noop import noop_result, tracked
from embinit.sweep.work import pack_units, units_to_run
from helpers.sweep import before_tune_state_goes, sweep_spec_data


@pytest.mark.parametrize("task", sorted(TASKS))
def test_noop_result_has_the_tasks_metrics_in_range(task):
    cfg = TrialConfig(task=task, seed=3, epochs=4)
    res = noop_result(cfg, "Xavier")
    assert [h["epoch"] for h in res["history"]] == [1, 2, 3, 4] and res["status"] == "finished"
    primary = primary_metric(task)
    values = {**res["test"], **{f"best/{k}": v for k, v in res["best"].items()}}
    assert primary in values and res["best_epoch"] in (1, 2, 3, 4)
    for name, _ in tracked(task):
        assert all(name in h for h in res["history"])
    # the validation loss a trained trial of the task logs, and no other (MNLI: per split, no val/loss)
    losses = {k for h in res["history"] for k in h if k.startswith("val/loss")}
    assert loss_metric(task) in losses and ("val/loss" in losses) == (loss_metric(task) == "val/loss")
    assert all(m in values for m in reported_metrics(task))      # MNLI: matched and mismatched
    if primary.endswith(("bleu", "acc", "acc_matched")):
        assert 0 <= values[primary] <= (100 if primary.endswith("bleu") else 1)
    assert noop_result(cfg, "Xavier") == res  # seeded by the trial key


def test_noop_trainer_refuses_fused_execution(tmp_path):
    data = sweep_spec_data("noop", tmp_path, "synthetic_translation", execution={"trainer": "noop", "fuse": "auto"})
    with pytest.raises(SpecError, match="noop"):
        load_spec(data)


def test_default_trainer_keeps_the_spec_hash(tmp_path):
    data = sweep_spec_data("noop", tmp_path, "synthetic_translation")
    assert load_spec(data).spec_hash() == load_spec({**data, "execution": {"trainer": "torch"}}).spec_hash()


def test_trials_per_unit_packs_grid_trials_in_plan_order(tmp_path):
    spec = load_spec(sweep_spec_data("pack", tmp_path, "synthetic_classification", seeds=7,
                                     execution={"trials_per_unit": 3}))
    units, _ = units_to_run(spec, set())
    packed = pack_units(units, spec.execution.trials_per_unit)
    assert [len(u.trials) for u in packed] == [3, 3, 1] and not any(u.fused for u in packed)
    assert [i.key for u in packed for i in u.trials] == [p.key for p in spec.plan()]
    assert pack_units(units, 1) == units


@pytest.mark.parametrize("over", [{"execution": {"trials_per_unit": 2, "fuse": "auto"}},
                                  {"execution": {"trials_per_unit": 2},
                                   "search": {"method": "optuna", "space": {"lr": {"low": 1e-4, "high": 1e-2}},
                                              "num_samples": 2}}])
def test_trials_per_unit_is_refused_where_units_are_groups_already(tmp_path, over):
    with pytest.raises(SpecError, match="trials_per_unit"):
        load_spec(sweep_spec_data("pack", tmp_path, "synthetic_classification", **over))


@pytest.mark.slow
def test_noop_sweep_records_real_runs_and_the_report_reads_them(ray_local, tmp_path):
    from embinit.sweep import run_sweep
    data = sweep_spec_data("noop", tmp_path, {"task": "synthetic_translation", "epochs": 3},
                           tasks=[{"task": "synthetic_translation", "epochs": 3}, "synthetic_classification"],
                           inits=["xavier", "normal"], seeds=2, execution={"trainer": "noop"})
    spec = load_spec(data)
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    result = run_sweep(spec, progress=False)
    assert (result.planned, result.n_finished, result.n_failed) == (8, 8, 0)
    runs = [r for r in mlflow_store.search_runs(mlflow_store.experiment_id("noop", uri), uri)
            if records.KEY_TAG in r.data.tags]
    assert {r.data.tags[records.KEY_TAG] for r in runs} == {p.key for p in spec.plan()}
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags[records.EXECUTION_TAG] == "noop"
        steps = sorted(m.step for m in mlflow_store.client(uri).get_metric_history(run.info.run_id, "val/loss"))
        if run.data.tags[records.TASK_TAG] == "synthetic_translation":
            assert steps == [1, 2, 3] and {"test/bleu", "best/val/loss", "val/bleu"} <= set(run.data.metrics)
        else:
            assert steps == [1, 2, 3, 4, 5] and "best/val/acc" in run.data.metrics
    rows = {(r["task"], r["init"]): r for r in result.report.rows}
    assert set(rows) == {(t, i) for t in ("synthetic_translation", "synthetic_classification")
                         for i in ("Xavier", "Normal")}
    assert all(r["n"] == 2 for r in rows.values())
    assert rows[("synthetic_translation", "Xavier")]["metric"] == "test/bleu"
    again = run_sweep(spec, progress=False)   # dedup by trial key: nothing runs twice
    assert (again.reused, again.n_finished) == (8, 8)


@pytest.mark.slow
def test_packed_units_record_every_trial_and_count_them(ray_local, tmp_path, monkeypatch):
    from embinit.sweep import run_sweep
    spec = load_spec(sweep_spec_data("packed", tmp_path, "synthetic_lm", inits=["xavier", "normal"], seeds=5,
                                     execution={"trainer": "noop", "trials_per_unit": 4}))
    states = before_tune_state_goes(monkeypatch, lambda: [p.read_text() for p in (
        tmp_path / "cache" / "ray_results").glob("*/experiment_state-*.json")])
    seen: list[dict] = []
    result = run_sweep(spec, progress=seen.append)
    assert (result.planned, result.n_finished, result.n_failed) == (10, 10, 0)
    assert seen[-1]["done"] == 10 and seen[-1]["pending"] == 0
    assert max(c["running"] for c in seen) <= 10   # a running unit counts its trials
    assert {r["n"] for r in result.report.rows} == {5}
    # Tune writes every trial's state at each of its checkpoints: no trial's state may carry the units
    # (a name creator closing over them made a 1.6 GB state file at 10,000 trials); Tune stores objects
    # there as hex of their pickle, so a trial key's hex would be in it.
    ((text,),) = states
    assert not [t for t in result.trials if t["key"].encode().hex() in text]


def test_the_trial_name_creator_pickles_small_whatever_the_units():
    import cloudpickle

    from embinit.sweep.tune_run import unit_name, unit_names, unit_title
    spec = load_spec({"name": "names", "tasks": ["synthetic_lm"], "inits": ["xavier"], "seeds": 400,
                      "execution": {"trainer": "noop", "trials_per_unit": 1}})
    from embinit.sweep.work import units_to_run
    units, _ = units_to_run(spec, set(), tuple(spec.plan()))
    sizes = []
    for n in (1, 400):
        with unit_names(f"sweep-{n:03d}", units[:n]) as (creator, folders):
            sizes.append(len(cloudpickle.dumps(creator)) + len(cloudpickle.dumps(folders)))
            trial = type("Trial", (), {"config": {"unit": n - 1}})()
            assert creator(trial) == unit_title(units[n - 1]) and folders(trial) == unit_name(units[n - 1])
    assert sizes[0] == sizes[1] < 2000
    assert creator(trial) == folders(trial) == "unit-399"      # the sweep is over: a plain name, never an error
