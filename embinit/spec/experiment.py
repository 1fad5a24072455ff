"""`ExperimentSpec`: one whole study (tasks, inits, seeds, axes, search, resources, MLflow settings),
validated field by field and then across fields (embinit.spec.checks), expanded into trials by
embinit.spec.planning."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml
from pydantic import model_validator

from embinit.config import TrialConfig
from embinit.redact import masked
from embinit.spec import path_fields, planning
from embinit.spec.checks import cross_check
from embinit.spec.fields import SpecFields
from embinit.spec.inits import InitEntry
from embinit.spec.models import Execution, TaskEntry
from embinit.spec.planning import PlannedTrial
from embinit.spec.problems import SpecError


# One whole study: the fields (embinit.spec.fields), checked across fields, with its expansion and identity.
# (No docstring: it would become the JSON schema's description.)
# Fields of the defaults and the task entries added after specs were first hashed: a spec that leaves one
# unset keeps the hash it had before (an unpinned hub dataset, beam search's default length penalty).
UNSET_LEAVES_HASH = ("data_revision", "length_penalty", "attention_dropout", "activation_dropout")


class ExperimentSpec(SpecFields):
    @model_validator(mode="after")
    def _cross_checks(self):
        problems = cross_check(self)
        if problems:
            raise SpecError(problems)
        return self

    # ---- expansion (embinit.spec.planning) ------------------------------------------------------
    def search_points(self) -> list[dict[str, Any]]:
        """Grid search points ([{}] without a grid search; Optuna points are drawn at run time)."""
        return planning.search_points(self)

    def axis_points(self) -> list[dict[str, Any]]:
        return planning.axis_points(self)

    def plan(self) -> list[PlannedTrial]:
        """Every trial: tasks x inits x axes x search points x seeds, in that nesting order."""
        return planning.plan(self)

    def expand(self) -> list[TrialConfig]:
        return [TrialConfig.from_dict(p.config) for p in self.plan()]

    def num_trials(self) -> int:
        """Planned trial count (for Optuna: the budget x seeds per scientific point), computed without
        expanding the grid (which could be astronomically big)."""
        per_point = self.search.num_samples if self.drawn else 1
        return planning.planned_count(self) * per_point

    def trial_config(self, task: TaskEntry, init: InitEntry, seed: int,
                     overrides: dict[str, Any] | None = None) -> TrialConfig:
        return planning.trial_config(self, task, init, seed, overrides)

    def tracking_uri(self, override: str | None = None) -> str:
        return override or self.mlflow.tracking_uri or "sqlite:///mlflow.db"

    def experiment_name(self) -> str:
        return self.mlflow.experiment or self.name

    def paths(self) -> list[tuple[str, str]]:
        """(field path, filesystem path) of every value of a path key (embinit.path_keys) the spec sets,
        wherever it is, for callers that confine or check them."""
        return [(where, value) for where, value in path_fields.paths(self.model_dump()) if value]

    def canonical(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if data.get("analyses") is None:
            data.pop("analyses", None)   # specs without analyses keep the hash they had before the field
        if data.get("execution") == Execution().model_dump(mode="json"):
            data.pop("execution", None)  # likewise for the default (separate) execution
        if (data.get("mlflow") or {}).get("log_outputs") is True:
            data["mlflow"].pop("log_outputs")   # likewise for the default: outputs logged
        if data.get("define_tasks") is None:
            data.pop("define_tasks", None)      # likewise without tasks of its own
        for task in data.get("tasks") or []:
            task.pop("definition", None)        # define_tasks' own, put there by the spec
        for entry in [data.get("defaults") or {}, *(data.get("tasks") or [])]:
            for name in UNSET_LEAVES_HASH:      # likewise for the fields added later, when unset
                if entry.get(name, "set") is None:
                    entry.pop(name)
        return data

    def recorded(self) -> dict[str, Any]:
        """The spec as a sweep records it and is known by (`spec_hash`, the `spec.yaml` artifact, which
        anyone who reads the MLflow store sees): `canonical` with the tracking URI's password masked (`${VAR}`
        in a spec is expanded), so a changed password keeps the hash and a URI without one is as written."""
        data = self.canonical()
        uri = (data.get("mlflow") or {}).get("tracking_uri")
        if uri:
            data["mlflow"] = {**data["mlflow"], "tracking_uri": masked(uri)}
        return data

    def spec_hash(self) -> str:
        blob = json.dumps(self.recorded(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.recorded(), sort_keys=False)
