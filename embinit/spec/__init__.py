"""Experiment specs: one pydantic model describing a whole study, expanded into `TrialConfig`s.

The same model is used by the CLI (`embinit run SPEC.yaml`), the YAML files in `tune_configs/` and the
HTTP service. Knob kinds follow Google's tuning playbook: task x init x seed (and the ablation `axes`)
are *scientific*; `search` holds *nuisance* hyperparameters searched per scientific point with the spec's
seeds at each search point (best mean selected, the paper's MNLI grid search); everything else is *fixed*
(per task, Table 5 defaults from the task registry, `embinit.task_registry`).

    name: glove-multi30k
    tasks: [multi30k]                      # or {task: multi30k, epochs: 20, batch_size: 64}
    inits: [xavier, glove, glove+standardize, {tgt: glove+standardize, src: xavier}]
    seeds: 4                               # or [0, 1, 2, 3]
    pretrained: {glove: ${EMBINIT_ASSETS}/glove.6B.50d.txt}
    axes: {pos_encoding: [true, false]}    # scientific grid axes (Table 3 ablation)
    search: {method: grid, space: {lr: [1e-4, 2e-4]}}

Validation collects every problem with its path (`inits[2]: ...`) and raises one `SpecError`.
`${VAR}` in path fields is expanded from the environment; an unset variable is a problem.
Validating a spec never imports torch.

Modules, in import order: `path_fields` (path-bearing keys, `${VAR}`), `problems` (`SpecError`, user
paths of validation errors), `models` (the building blocks), `inits` (`InitEntry`), `fields` (`SpecFields`,
what planning and the checks read), `planning` (expansion into trials), `checks` (cross-field checks),
`experiment` (`ExperimentSpec`), `loading` (`load_spec`), `full_check` (`check_spec`: every stage's problems,
local paths, data folders and model sizes included, in one list).
"""

from embinit.config import HYPERPARAMETERS
from embinit.spec.experiment import ExperimentSpec
from embinit.spec.fields import drawn_in
from embinit.spec.inits import InitEntry, init_label, init_string, source_name
from embinit.spec.loading import check_local_paths, data_problems, load_spec, offline_data_problems
from embinit.spec.models import (Analyses, Execution, Hyperparams, MlflowSettings, ProbeAnalysis, Range,
                                 Resources, Search, SimilarityAnalysis, TaskEntry)
from embinit.spec.path_fields import DATA_KEYS, PATH_KEYS, PRETRAINED_KEYS, PathStr, expand_env, spec_path
from embinit.spec.planning import PlannedTrial
from embinit.spec.problems import SpecError
from embinit.spec.yaml_text import SpecLoader, unique_pairs, yaml_error

__all__ = ["ExperimentSpec", "drawn_in", "InitEntry", "SpecError", "check_local_paths", "data_problems", "load_spec",
           "offline_data_problems",
           "Hyperparams", "TaskEntry", "Search",
           "Range", "Resources", "MlflowSettings", "PlannedTrial", "Analyses", "Execution",
           "ProbeAnalysis", "SimilarityAnalysis", "HYPERPARAMETERS", "DATA_KEYS", "PRETRAINED_KEYS",
           "PATH_KEYS", "PathStr", "expand_env", "spec_path", "init_label", "init_string", "source_name",
           "yaml_error", "SpecLoader", "unique_pairs"]
