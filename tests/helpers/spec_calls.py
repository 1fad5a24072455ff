"""Counting how often a spec is validated and expanded (tests/test_service_submit_once.py for the API
process, tests/test_sweep_plan_once.py for a sweep and a service driver)."""

from __future__ import annotations

from collections import Counter

from embinit.spec import experiment, planning


def count_spec_work(monkeypatch, with_count: bool = False) -> Counter:
    """Counts calls of the spec's cross-field checks (`validate`: one per validation that got that far),
    of its expansion (`plan`) and, with `with_count`, of its trial count (`count`)."""
    calls: Counter = Counter()

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper
    monkeypatch.setattr(experiment, "cross_check", counting("validate", experiment.cross_check))
    monkeypatch.setattr(planning, "plan", counting("plan", planning.plan))
    if with_count:
        monkeypatch.setattr(planning, "planned_count", counting("count", planning.planned_count))
    return calls
