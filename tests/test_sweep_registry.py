"""Two sweeps in one Ray job (the service's experiment drivers all live in the API's job) must not share
a Tune registry entry: Tune looks a trial's trainable up by name when it starts the trial, so a shared
name lets the later sweep's trainable (its units, its MLflow experiment) replace the earlier one's."""

from __future__ import annotations

from ray.tune.experiment import Experiment
from ray.tune.registry import TRAINABLE_CLASS, _global_registry

from embinit.spec import load_spec
from embinit.sweep.tune_run import make_trainable
from embinit.sweep.work import SweepContext


def _spec(name: str):
    return load_spec({"name": name, "tasks": ["synthetic_lm"], "inits": ["xavier"], "seeds": 1})


def test_each_sweep_registers_its_own_trainable():
    names = []
    for name in ("exp-a", "exp-b", "exp-a"):  # the same spec twice (a re-run) gets its own entry too
        shared = SweepContext(tracking_uri="sqlite:///unused.db", experiment_id=name, parent_run_id="p")
        fn = make_trainable(_spec(name), [{"trials": [{"key": name}]}], shared, None)
        names.append(Experiment.register_if_needed(fn))
    assert len(set(names)) == 3, names
    for name in names:
        assert _global_registry.contains(TRAINABLE_CLASS, name)
    import ray
    assert not ray.is_initialized()   # making a trainable starts no Ray (a later module's ray.init would fail)
