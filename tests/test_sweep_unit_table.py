"""A sweep's units reach its workers once per worker process, not unpickled whole for every Tune trial
(embinit.sweep.unit_table): with 10,000 one-trial units that was 2.2 MB and ~170 ms of CPU per trial."""

from __future__ import annotations

import pickle
import sys

import pytest
import ray
import ray.cloudpickle
from ray import tune

from embinit.sweep import unit_table
from embinit.sweep.unit_table import UnitTable
from embinit.sweep.work import Unit, WorkItem


def _units(n: int) -> list[Unit]:
    return [Unit((WorkItem({"seed": i, "task": "synthetic_lm"}, f"L{i}", {}, {}, ("val/loss", "min"), f"k{i}"),))
            for i in range(n)]


class _Counting(dict):
    """The worker's cache, counting the fetches that fill it."""
    fetches = 0

    def __setitem__(self, key, value):
        self.fetches += 1
        super().__setitem__(key, value)


def test_without_ray_the_table_carries_its_units():
    units = _units(3)
    table = pickle.loads(pickle.dumps(UnitTable(units)))
    assert not table.shared
    assert len(table) == 3 and table[2] == units[2]


def test_a_worker_fetches_the_units_once_and_each_trial_gets_its_own_copy(ray_local, monkeypatch):
    units = _units(50)
    made = UnitTable(units)
    assert made.shared
    monkeypatch.setattr(unit_table, "_FETCHED", cache := _Counting())
    worker = ray.cloudpickle.loads(ray.cloudpickle.dumps(made))   # as a worker process unpickles it
    assert worker._units is None
    assert [worker[i].trials[0].key for i in (0, 49, 7, 7)] == ["k0", "k49", "k7", "k7"]
    assert len(worker) == 50 and cache.fetches == 1
    worker[7].trials[0].config["seed"] = -1                 # a trial changing its unit's config
    assert worker[7].trials[0].config["seed"] == 7          # does not change the next trial's

    other = ray.cloudpickle.loads(ray.cloudpickle.dumps(UnitTable(_units(2))))  # another sweep's table
    assert other[1].trials[0].key == "k1" and cache.fetches == 2
    assert len(unit_table._FETCHED) == 1                    # one sweep's units kept at a time


def _key_and_fetches(config, units):
    """In a worker: the unit's key, and how many fetches this process's cache has seen."""
    if not isinstance(unit_table._FETCHED, _Counting):
        unit_table._FETCHED = _Counting()
    return units[config["unit"]].trials[0].key, unit_table._FETCHED.fetches


@pytest.mark.parametrize("as_table", [True, False])
def test_tune_trials_in_one_reused_worker(ray_local, as_table):
    """Tune's with_parameters unpickles its values at every call: the plain list at every trial, the
    table's reference only (the worker fetches the units at its first trial)."""
    @ray.remote(num_cpus=0)
    class Worker:   # a reused Tune worker: one process, many trials
        def run(self, fn, picks):
            return [fn({"unit": i}) for i in picks]

    units = _units(40)
    module = sys.modules[__name__]
    ray.cloudpickle.register_pickle_by_value(module)   # the worker cannot import this test module
    try:
        fn = tune.with_parameters(_key_and_fetches, units=UnitTable(units) if as_table else units)
        got = ray.get(Worker.remote().run.remote(fn, [3, 39, 0, 3, 12]))
    finally:
        ray.cloudpickle.unregister_pickle_by_value(module)
    assert [key for key, _ in got] == ["k3", "k39", "k0", "k3", "k12"]
    assert [fetches for _, fetches in got] == ([1] * 5 if as_table else [0] * 5)
