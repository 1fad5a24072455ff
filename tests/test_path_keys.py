"""The keys that name files are declared once (embinit.path_keys); the spec's path fields, the trial
key's file inputs, the service's confinement and `ExperimentSpec.paths()` are views of that one table."""

from __future__ import annotations

import dataclasses
import typing

from pydantic import BaseModel

from embinit import file_inputs, path_keys
from embinit.config import TrialConfig
from embinit.spec import load_spec
from embinit.spec.experiment import ExperimentSpec


def _models(model: type[BaseModel], seen: set) -> set:
    """`model` and every pydantic model its fields hold, however nested in the annotations."""
    if model in seen:
        return seen
    seen.add(model)
    for field in model.model_fields.values():
        todo = [field.annotation]
        while todo:
            t = todo.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                _models(t, seen)
            todo += typing.get_args(t)
    return seen


def _path_fields() -> set[str]:
    """The fields of the spec's models typed as a path (`PathStr`: `${VAR}` and `./x` resolved)."""
    return {name for model in _models(ExperimentSpec, set()) for name, field in model.model_fields.items()
            if "_path_field" in repr(field.annotation)}


def test_the_spec_types_exactly_the_declared_keys_as_paths():
    assert _path_fields() == set(path_keys.PATH_KEYS)


def test_the_trial_keys_file_inputs_are_the_declared_trial_inputs_among_trialconfigs_fields():
    trial_fields = {f.name for f in dataclasses.fields(TrialConfig)}
    assert set(file_inputs.FILE_FIELDS) == trial_fields & set(path_keys.PATH_KEYS)
    assert file_inputs.FILE_FIELDS is path_keys.FILE_FIELDS


def test_the_service_confines_the_declared_keys():
    from service import paths
    assert (paths.DATA_KEYS, paths.PRETRAINED_KEYS) == (path_keys.DATA_KEYS, path_keys.PRETRAINED_KEYS)
    assert set(paths.NOT_A_FILE) == set(path_keys.PRETRAINED_KEYS)


def test_spec_paths_lists_every_declared_key_wherever_it_is():
    """init_from (defaults, a task), an axis of tokenizers and an init's side options are paths too."""
    spec = load_spec({"name": "t", "tasks": [{"task": "synthetic_lm", "init_from": "/b.pt"}],
                      "inits": ["xavier"], "defaults": {"init_from": "/a.pt"},
                      "axes": {"tokenizer": ["whitespace", "/tok"]}})
    assert dict(spec.paths()) == {"defaults.init_from": "/a.pt", "tasks[0].init_from": "/b.pt",
                                  "axes.tokenizer[0]": "whitespace", "axes.tokenizer[1]": "/tok"}
