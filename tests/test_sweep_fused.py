"""Fused execution in a sweep: the `execution` spec option, which trials group, and a fused sweep on
local Ray whose MLflow runs a separate sweep of the same trials reuses (dedup cannot tell them apart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from embinit.tracking import mlflow_store, records
from embinit.spec import SpecError, load_spec
from embinit.sweep.fused import group_units
from embinit.sweep.work import units_to_run

TINY = {"task": "synthetic_translation", "epochs": 2, "max_train_examples": 200, "d_model": 16,
        "ff_dim": 32, "heads": 2, "extras": {"val_bleu": False}}


def spec(tmp: Path | None = None, **over):
    data = {"name": "fz", "tasks": [TINY], "inits": ["xavier", "normal"], "seeds": 3,
            "resources": {"cpus": 1}, "execution": {"fuse": "always", "max_group": 4}}
    if tmp is not None:
        data.update(cache_dir=str(tmp / "cache"), mlflow={"tracking_uri": f"sqlite:///{tmp}/mlflow.db"})
    data.update(over)
    return load_spec(data)


def test_execution_defaults_to_separate_and_keeps_the_spec_hash():
    plain = load_spec({"name": "fz", "tasks": [TINY], "inits": ["xavier"]})
    assert plain.execution.fuse == "off" and plain.execution.max_group == 8
    explicit = load_spec({"name": "fz", "tasks": [TINY], "inits": ["xavier"], "execution": {"fuse": "off"}})
    assert explicit.spec_hash() == plain.spec_hash() and "execution" not in plain.to_yaml()
    assert spec().spec_hash() != load_spec({**spec().canonical(), "execution": {"fuse": "off"}}).spec_hash()


@pytest.mark.parametrize("written, expected", [("off", "off"), ("no", "off"), ("on", "auto"), ("auto", "auto")])
def test_yaml_booleans_mean_what_they_say(tmp_path, written, expected):
    """YAML 1.1 reads `off`, `no` and `on` as booleans: `fuse: off` in a spec file, or
    `execution.fuse=off` on the command line, must still mean off."""
    path = tmp_path / "s.yaml"
    path.write_text(f"name: fz\ntasks: [synthetic_translation]\ninits: [xavier]\nexecution: {{fuse: {written}}}\n")
    from_file = load_spec(str(path))
    assert from_file.execution.fuse == expected
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: fz\ntasks: [synthetic_translation]\ninits: [xavier]\n")
    assert load_spec(str(plain), [f"execution.fuse={written}"]).execution.fuse == expected
    if expected == "off":
        assert from_file.spec_hash() == load_spec(str(plain)).spec_hash()


@pytest.mark.parametrize("execution, where, message", [
    ({"fuse": "yes"}, "execution.fuse", "'auto', 'always' or 'off'"),
    ({"max_group": 1}, "execution.max_group", "greater than or equal to 2"),
    ({"fuse": "auto", "groups": 2}, "execution.groups", "unknown field 'groups'"),
])
def test_bad_execution_settings_name_the_field(execution, where, message):
    with pytest.raises(SpecError) as e:
        spec(execution=execution)
    assert any(p == where and message in m for p, m in e.value.problems), e.value.problems


def test_fusing_optuna_points_and_analyses_is_allowed_and_the_noop_trainer_is_refused():
    optuna = {"method": "optuna", "space": {"lr": {"low": 1e-4, "high": 1e-3}}, "num_samples": 2}
    s = spec(search=optuna, analyses={"probe": True, "similarity": {"reference_seed": 0}})
    assert s.execution.fuse == "always" and s.search.method == "optuna"
    with pytest.raises(SpecError) as e:
        spec(search=optuna, execution={"fuse": "auto", "trainer": "noop", "trials_per_unit": 2})
    problems = sorted(e.value.problems)
    assert [p for p, _ in problems] == ["execution.fuse", "execution.trials_per_unit"], problems
    assert "noop trainer" in problems[0][1] and "units already" in problems[1][1]


def test_grouping_by_task_shape_and_schedule():
    s = spec(tasks=[TINY, {**TINY, "task": "synthetic_classification", "d_model": None, "extras": None}],
             axes={"pos_encoding": [True, False]})
    units = group_units(units_to_run(s, set())[0], max_group=4)
    assert all(u.fused for u in units)
    # per task and pos_encoding value: 2 inits x 3 seeds = 6 trials -> groups of 4 + 2, never mixed; each
    # seed's two inits (one data order) stay together
    assert sorted(len(u.trials) for u in units) == [2, 2, 2, 2, 4, 4, 4, 4]
    assert all(len([t for t in u.trials if t.config["seed"] == t0.config["seed"]]) == 2
               for u in units for t0 in u.trials)
    for u in units:
        assert len({t.config["pos_encoding"] for t in u.trials}) == 1
        assert len({t.config["task"] for t in u.trials}) == 1
    assert sum(len(u.trials) for u in units) == len(s.plan())
    assert group_units(units_to_run(spec(tasks=[{**TINY, "max_tokens": 200}]), set())[0], 4) == \
        units_to_run(spec(tasks=[{**TINY, "max_tokens": 200}]), set())[0]


@pytest.mark.parametrize("slots, sizes", [(None, [4, 4]), (1, [4, 4]), (2, [4, 4]), (3, [2, 2, 2, 2]),
                                          (4, [2, 2, 2, 2]), (8, [1] * 8), (20, [1] * 8)])
def test_groups_never_leave_a_slot_idle(slots, sizes):
    """8 same-shape trials (2 inits x 4 seeds), max_group 4: on a cluster that runs `slots` Ray trials
    at once a group holds at most ceil(8 / slots); a seed's two inits (one data order) are never split;
    with a slot per trial nothing fuses."""
    s = spec(seeds=4)
    units = group_units(units_to_run(s, set())[0], max_group=4, slots=slots)
    assert sorted(len(u.trials) for u in units) == sizes
    assert all(u.fused == (len(u.trials) > 1) for u in units)
    assert sorted(t.key for u in units for t in u.trials) == sorted(p.key for p in s.plan())
    seeds = [{t.config["seed"] for t in u.trials} for u in units]
    assert all(len(a & b) == 0 for i, a in enumerate(seeds) for b in seeds[i + 1:]) or sizes == [1] * 8


def test_a_data_order_s_trials_share_a_group_so_nothing_is_padded():
    """4 inits x 2 seeds in groups of 4: one group per seed (its 4 inits see the same batches), not
    two seeds in each; a data_seed shared across seeds counts as one data order."""
    s = spec(seeds=2, inits=["xavier", "normal", "xavier_normal", "xavier+rescale=4x"])
    units = group_units(units_to_run(s, set())[0], max_group=4)
    assert sorted(sorted({t.config["seed"] for t in u.trials}) for u in units) == [[0], [1]]
    shared = spec(seeds=4, inits=["xavier", "normal"], tasks=[{**TINY, "data_seed": 7}])
    units = group_units(units_to_run(shared, set())[0], max_group=4)
    assert sorted(len(u.trials) for u in units) == [4, 4]


def test_always_fuses_at_least_pairs_and_auto_fuses_gpu_trials_only():
    s = spec(seeds=4)
    units = group_units(units_to_run(s, set())[0], max_group=4, slots=8, pairs=True)
    assert sorted(len(u.trials) for u in units) == [2, 2, 2, 2] and all(u.fused for u in units)
    execution = {name: spec(execution={"fuse": name}).execution for name in ("auto", "always", "off")}
    assert [execution[n].fuses(0) for n in ("auto", "always", "off")] == [False, True, False]
    assert [execution[n].fuses(0.25) for n in ("auto", "always", "off")] == [True, True, False]


def test_parallel_slots_reads_the_cluster_and_max_concurrent(monkeypatch):
    import ray

    from embinit.sweep.fused import parallel_slots
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 1.0})
    assert parallel_slots(1, 0, None) == 16
    assert parallel_slots(2, 0.25, None) == 4            # the GPU binds: 4 trials per GPU
    assert parallel_slots(1, 0.25, 3) == 3               # max_concurrent caps it
    assert parallel_slots(32, 0, None) == 1
    monkeypatch.setattr(ray, "cluster_resources", lambda: {})
    assert parallel_slots(1, 0, None) == 1 and parallel_slots(0, 0, None) is None


@pytest.mark.slow
def test_auto_runs_cpu_trials_separately_and_says_why(ray_local, tmp_path, capsys):
    from embinit.sweep import run_sweep
    s = spec(tmp_path, seeds=1, execution={"fuse": "auto"},
             mlflow={"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "log_plots": False})
    result = run_sweep(s, progress=True)
    assert (result.planned, result.n_finished) == (2, 2)
    assert "fuse: auto: these trials run on CPU (resources.gpus: 0)" in capsys.readouterr().err
    uri = mlflow_store.resolve_uri(s.mlflow.tracking_uri)
    runs = mlflow_store.search_runs(mlflow_store.experiment_id("fz", uri), uri)
    assert {r.data.tags[records.EXECUTION_TAG] for r in runs if records.KEY_TAG in r.data.tags} == {"separate"}


@pytest.mark.slow
@pytest.mark.parametrize("task, final", [("synthetic_translation", "test/loss"),
                                         ("synthetic_classification", "best/val/acc")])
def test_fused_sweep_runs_are_the_trials_runs(ray_local, tmp_path, task, final):
    from embinit.config import TrialConfig
    from embinit.sweep import run_sweep
    from embinit.train import run_trial
    s = spec(tmp_path, seeds=2, tasks=[{**TINY, "task": task}],
             mlflow={"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "log_plots": False})
    result = run_sweep(s, progress=False)
    assert (result.planned, result.n_finished, result.n_failed) == (4, 4, 0)
    uri = mlflow_store.resolve_uri(s.mlflow.tracking_uri)
    runs = [r for r in mlflow_store.search_runs(mlflow_store.experiment_id("fz", uri), uri)
            if records.KEY_TAG in r.data.tags]
    assert sorted(r.data.tags[records.KEY_TAG] for r in runs) == sorted(p.key for p in s.plan())
    assert {r.data.tags[records.EXECUTION_TAG] for r in runs} == {"fused"}
    for r in runs:
        steps = [m.step for m in mlflow_store.client(uri).get_metric_history(r.info.run_id, "val/loss")]
        assert sorted(steps) == [1, 2] and final in r.data.metrics
    first = s.plan()[0]
    alone = run_trial(TrialConfig.from_dict(first.config), cache_dir=tmp_path / "cache")
    run = next(r for r in runs if r.data.tags[records.KEY_TAG] == first.key)
    logged = {**alone.test, **{f"best/{k}": v for k, v in alone.best.items()}}
    assert run.data.metrics[final] == pytest.approx(logged[final], rel=1e-4)
    # a separate-execution submission of the same trials finds them all done
    again = run_sweep(load_spec({**s.canonical(), "execution": {"fuse": "off"}}), progress=False)
    assert (again.planned, again.reused) == (4, 4)


def test_a_group_reports_its_objective_epochs_and_best_to_tune(monkeypatch, tmp_path):
    """What Tune (an Optuna search, the progress table) sees of a fused group each epoch: the members'
    mean selection metric at their latest epoch, the planned epochs, and the best member so far."""
    import contextlib
    import math
    from types import SimpleNamespace

    from ray import tune

    from embinit.sweep import fused, resume
    sent = []
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: sent.append(metrics))
    monkeypatch.setattr(resume, "tune_checkpoint", lambda claims, one_machine: contextlib.nullcontext())
    members = [SimpleNamespace(last=0.6, best=0.7, mode="max"), SimpleNamespace(last=0.8, best=0.8, mode="max"),
               SimpleNamespace(last=math.nan, best=math.nan, mode="max")]   # diverged
    fused.GroupReporter(["a", "b", "c"], members, epochs=5).on_group_epoch_end(2)
    assert sent[-1]["objective"] == pytest.approx(0.7) and sent[-1]["embinit_best"] == 0.8
    assert (sent[-1]["embinit_epoch"], sent[-1]["embinit_epochs"], sent[-1]["embinit_trials"]) == (2, 5, 3)
