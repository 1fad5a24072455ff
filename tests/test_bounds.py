"""Each numeric bound is declared once, in embinit.bounds.BOUNDS; the spec model, the trainer's
`check_config` and `load_task` are views of it and agree (max_len >= 2 everywhere: a sequence needs a
the spec always said 2; the task loader said 1)."""

from __future__ import annotations

import typing

import pytest
from annotated_types import Ge, Gt, Le, Lt

from embinit import bounds
from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.spec import Hyperparams, SpecError, load_spec

_KEYWORD = {Ge: "ge", Gt: "gt", Le: "le", Lt: "lt"}


def _constraints(name: str) -> dict:
    """The numeric constraints pydantic applies to the spec field `name`."""
    out = {}
    for meta in Hyperparams.model_fields[name].metadata:
        if type(meta) in _KEYWORD:
            key = _KEYWORD[type(meta)]
            out[key] = getattr(meta, key)
    return out


def _numeric(name: str) -> bool:
    args = typing.get_args(Hyperparams.model_fields[name].annotation)
    return any(a in (int, float) for a in args)


def test_every_numeric_hyperparameter_has_one_declared_bound_and_the_spec_applies_it():
    numeric = {name for name in Hyperparams.model_fields if _numeric(name)}
    assert {"max_len", "dropout", "heads", "threads", "min_freq"} <= numeric
    assert numeric - set(bounds.BOUNDS) == set()
    assert {name: _constraints(name) for name in numeric} == {name: bounds.field_limits(name) for name in numeric}


@pytest.mark.parametrize("name, value, msg", [
    ("max_len", 1, "max_len must be >= 2, got 1"),
    ("dropout", 1.0, "dropout must be < 1"),
    ("pe_base", 0.0, "pe_base must be > 0, got 0"),
    ("heads", 0, "heads must be >= 1, got 0"),
    ("threads", 0, "threads must be >= 1, got 0"),
    ("length_penalty", -0.5, "length_penalty must be >= 0, got -0.5"),
    ("length_penalty", 11.0, "length_penalty must be <= 10"),
    ("attention_dropout", 1.0, "attention_dropout must be < 1"),
    ("activation_dropout", -0.1, "activation_dropout must be >= 0, got -0.1"),
])
def test_the_spec_and_the_trainer_refuse_the_same_values(name, value, msg):
    from embinit.train.prepare import check_config
    spec = {"name": "t", "tasks": ["synthetic_lm"], "inits": ["xavier"], "defaults": {name: value}}
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    assert f"defaults.{name}" in dict(e.value.problems)
    with pytest.raises(EmbinitError, match=msg):
        check_config(TrialConfig(task="synthetic_lm", **{name: value}))
    assert bounds.problem(name, value).startswith(msg)


def test_max_len_1_is_refused_by_the_spec_the_trainer_and_the_task_loader():
    from embinit.tasks import load_task
    from embinit.train.prepare import check_config
    with pytest.raises(SpecError, match="max_len"):
        load_spec({"name": "t", "tasks": [{"task": "synthetic_lm", "max_len": 1}], "inits": ["xavier"]})
    with pytest.raises(EmbinitError, match="max_len must be >= 2, got 1"):
        check_config(TrialConfig(task="synthetic_lm", max_len=1))
    with pytest.raises(EmbinitError, match="max_len must be >= 2, got 1"):
        load_task("synthetic_lm", tokenizer="whitespace", cache_dir=False, max_len=1)


def test_open_ends_become_strict_pydantic_limits():
    assert bounds.field_limits("dropout") == {"ge": 0, "lt": 1}
    assert bounds.field_limits("pe_base") == {"gt": 0}
    assert bounds.problem("dropout", 0.0) is None and bounds.problem("pe_base", 1e-9) is None
