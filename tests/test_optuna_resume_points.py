"""Which finished trials an Optuna search resumes from (`optuna_search._evaluated`): only those it would
train itself at their point (same key), at points inside its space. An earlier spec's trials in the same
experiment, with other epochs or another space, neither use up the new search's budget nor reach its
sampler."""

from __future__ import annotations

from embinit.config import TrialConfig
from embinit.spec import load_spec
from embinit.sweep.optuna_search import _evaluated, _groups, in_space
from embinit.tracking.records import TrialRecord
from helpers.sweep import sweep_spec_data

TINY = {"task": "synthetic_classification", "epochs": 1, "max_train_examples": 200, "d_model": 16,
        "ff_dim": 32, "heads": 2}
SPACE = {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}


def _spec(tmp, task=TINY, space=SPACE):
    return load_spec(sweep_spec_data("opt", tmp, task, seeds=[0, 1],
                                     search={"method": "optuna", "num_samples": 3, "space": space}))


def _records(spec, points, value=0.5):
    """FINISHED records of `spec`'s trials at `points`, every seed, as its own sweep would have logged them."""
    (items,) = _groups(spec, tuple(spec.plan())).values()
    out = []
    for i, point in enumerate(points):
        for item in items:
            cfg = {**item.config, **point}
            out.append(TrialRecord(run_id=f"r{i}{item.config['seed']}", key=TrialConfig.from_dict(cfg).key(),
                                   task=item.config["task"], label=item.label, status="FINISHED", config=cfg,
                                   group={"axes": {}, "point": point}, seed=item.config["seed"],
                                   metrics={f"best/{item.metric}": value + i}))
    return items, {(items[0].label, items[0].config["task"]): out}


def test_the_search_s_own_points_resume(tmp_path):
    spec = _spec(tmp_path)
    items, finished = _records(spec, [{"lr": 1e-3}, {"lr": 3e-3}])
    points, rewards = _evaluated(spec, finished, items)
    assert points == [{"lr": 1e-3}, {"lr": 3e-3}] and rewards == [0.5, 1.5]


def test_trials_of_a_spec_with_other_epochs_are_not_this_search_s_points(tmp_path):
    before = _spec(tmp_path)
    _, finished = _records(before, [{"lr": 1e-3}, {"lr": 3e-3}])
    after = _spec(tmp_path, task={**TINY, "epochs": 2})
    (items,) = _groups(after, tuple(after.plan())).values()
    assert _evaluated(after, finished, items) == ([], [])      # its whole budget trains


def test_points_outside_a_narrowed_space_do_not_count(tmp_path):
    before = _spec(tmp_path)
    _, finished = _records(before, [{"lr": 1e-3}, {"lr": 5e-3}])
    after = _spec(tmp_path, space={"lr": {"low": 2e-3, "high": 1e-2, "log": True}})
    (items,) = _groups(after, tuple(after.plan())).values()
    points, _ = _evaluated(after, finished, items)
    assert points == [{"lr": 5e-3}]


def test_in_space():
    spec = load_spec(sweep_spec_data("opt", __import__("pathlib").Path("/tmp"), TINY, search={
        "method": "optuna", "num_samples": 2,
        "space": {"lr": {"low": 1e-4, "high": 1e-2}, "dropout": [0.1, 0.3]}}))
    assert in_space(spec, {"lr": 1e-3, "dropout": 0.3})
    assert not in_space(spec, {"lr": 1e-3, "dropout": 0.2})     # not one of the list's values
    assert not in_space(spec, {"lr": 2e-2, "dropout": 0.1})     # outside the range
    assert not in_space(spec, {"lr": 1e-3})                     # another space's keys
