"""Experiment specs: one pydantic model describing a whole study, expanded into `TrialConfig`s.

The same model is used by the CLI (`embinit run SPEC.yaml`), the YAML files in `tune_configs/` and the
HTTP service. Knob kinds follow Google's tuning playbook: task x init x seed (and the ablation `axes`)
are *scientific*; `search` holds *nuisance* hyperparameters searched per scientific point with the spec's
seeds at each search point (best mean selected, the paper's MNLI grid search); everything else is *fixed*
(per task, Table 5 defaults from `embinit.config.TASKS`).

    name: glove-multi30k
    tasks: [multi30k]                      # or {task: multi30k, epochs: 20, batch_size: 64}
    inits: [xavier, glove, glove+standardize, {tgt: glove+standardize, src: xavier}]
    seeds: 4                               # or [0, 1, 2, 3]
    pretrained: {glove: ${EMBINIT_ASSETS}/glove.6B.50d.txt}
    axes: {pos_encoding: [true, false]}    # scientific grid axes (Table 3 ablation)
    search: {method: grid, space: {lr: [1e-4, 2e-4]}}

Validation collects every problem with its path (`inits[2]: ...`) and raises one `SpecError`.
`${VAR}` in path fields is expanded from the environment; an unset variable is a problem.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from embinit.config import TASKS, TrialConfig
from embinit.errors import EmbinitError

__all__ = ["ExperimentSpec", "InitEntry", "SpecError", "load_spec", "Hyperparams", "TaskEntry", "Search",
           "Range", "Resources", "MlflowSettings", "PlannedTrial", "Analyses", "Execution"]

# TrialConfig fields a spec may set per task, in `defaults`, as an ablation axis or in a search space.
HYPERPARAMETERS = ("data_seed", "init_from", "epochs", "batch_size", "max_tokens", "lr", "d_model", "layers", "heads",
                   "ff_dim", "dropout", "min_freq", "max_len", "pe_base", "pre_ln", "pos_encoding", "train_embeddings",
                   "freeze_non_embeddings", "tie_embeddings", "early_stopping_patience", "max_train_examples",
                   "beam_size", "precision", "oov", "tokenizer", "threads", "device", "extras")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SpecError(EmbinitError):
    """An invalid spec; `.problems` lists every (path, message), the message joins them on one line."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        joined = "; ".join(f"{p}: {m}" if p else m for p, m in self.problems)
        super().__init__(f"invalid experiment spec ({len(self.problems)} problem"
                         f"{'s' if len(self.problems) != 1 else ''}): {joined}")


def expand_env(value: str | None) -> str | None:
    """`${VAR}` -> its value; an unset variable raises ValueError (reported with the field's path)."""
    if value is None:
        return None
    missing = [m for m in _ENV.findall(value) if m not in os.environ]
    if missing:
        raise ValueError(f"environment variable {missing[0]} is not set (needed by {value!r}); "
                         f"export {missing[0]}=... or write the path out")
    return _ENV.sub(lambda m: os.environ[m.group(1)], value)


def spec_path(value: str | None, info: ValidationInfo | None = None) -> str | None:
    """A path field: `${VAR}` expanded; `./x` and `../x` taken relative to the spec file's folder when
    the spec came from a file (like docker-compose), so a spec travels with its data."""
    value = expand_env(value)
    base = (info.context or {}).get("base_dir") if info is not None and info.context else None
    if value is not None and base is not None and value.startswith(("./", "../")):
        return str((Path(base) / value).resolve())
    return value


def _path_field(value: str, info: ValidationInfo) -> str | None:
    return spec_path(value, info)


# A path field: `${VAR}` expanded, `./x` relative to the spec file's folder.
PathStr = Annotated[str, AfterValidator(_path_field)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # no float field means inf or NaN


class Hyperparams(_Strict):
    """Fixed hyperparameters (None = the task's Table 5 default). Names are `TrialConfig` fields."""

    data_seed: int | None = Field(None, ge=0)   # one data order for every seed (KNN post, exp. 1)
    init_from: PathStr | None = None            # a checkpoint whose non-embedding weights start the model
    epochs: int | None = Field(None, ge=1)
    batch_size: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    lr: float | None = Field(None, gt=0)
    d_model: int | None = Field(None, ge=1)
    layers: int | None = Field(None, ge=1)
    heads: int | None = Field(None, ge=1)
    ff_dim: int | None = Field(None, ge=1)
    dropout: float | None = Field(None, ge=0, lt=1)
    min_freq: int | None = Field(None, ge=1)
    max_len: int | None = Field(None, ge=2)
    pe_base: float | None = Field(None, gt=0)
    pre_ln: bool | None = None
    pos_encoding: bool | None = None
    train_embeddings: bool | None = None
    freeze_non_embeddings: bool | None = None
    tie_embeddings: bool | None = None   # LM only: output layer = the token table (GPT-2 style)
    early_stopping_patience: int | None = Field(None, ge=1)
    max_train_examples: int | None = Field(None, ge=1)
    beam_size: int | None = Field(None, ge=1)
    precision: Literal["fp32", "bf16", "auto"] | None = None
    oov: str | None = None
    tokenizer: PathStr | None = None   # spacy | gpt2 | whitespace | a HF model folder or hub id
    threads: int | None = Field(None, ge=1)
    device: str | None = None
    extras: dict[str, Any] | None = None

    def set_values(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class TaskEntry(Hyperparams):
    """One task with its fixed hyperparameters; a bare task name in YAML means all defaults."""

    task: str
    data_dir: PathStr | None = None  # the task's own data folder (Multi30k's train.de, ...)

    @field_validator("task")
    @classmethod
    def _known_task(cls, v: str) -> str:
        if v not in TASKS:
            raise ValueError(f"{v!r} is not a registered task; choose from {sorted(TASKS)}")
        return v



class Range(_Strict):
    """A continuous/integer range for Optuna (grid search needs explicit lists)."""

    low: float
    high: float
    log: bool = False
    type: Literal["float", "int"] = "float"

    @model_validator(mode="after")
    def _ordered(self):
        if not self.low < self.high:
            raise ValueError(f"low < high must hold, but got (low={self.low}, high={self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"a log range needs low > 0, but got low={self.low}")
        return self


class Search(_Strict):
    """Nuisance hyperparameters searched per (task, init, axes) point; each point runs every seed and
    the point with the best mean `metric` is the one reported."""

    method: Literal["grid", "optuna"] = "grid"
    space: dict[str, list[Any] | Range] = Field(min_length=1)
    num_samples: int | None = Field(None, ge=1, validate_default=True)  # optuna: points per group
    metric: str | None = None   # default: the task's selection metric, e.g. val/acc_matched
    mode: Literal["min", "max"] | None = None

    @field_validator("space")
    @classmethod
    def _values(cls, space, info: ValidationInfo):
        problems = [f"{k} is an empty list" for k, v in space.items() if isinstance(v, list) and not v]
        if info.data.get("method") == "grid":
            problems += [f"{k}: grid search needs a list of values, got a range"
                         for k, v in space.items() if isinstance(v, Range)]
        if problems:
            raise ValueError("; ".join(problems))
        return space

    @field_validator("num_samples")
    @classmethod
    def _budget(cls, n, info: ValidationInfo):
        if n is None and info.data.get("method") == "optuna":
            raise ValueError("optuna search needs a trial budget (num_samples)")
        return n


class Resources(_Strict):
    cpus: float = Field(1.0, gt=0)
    gpus: float = Field(0.0, ge=0)


class Execution(_Strict):
    """How trials run. `fuse: auto` trains each group of trials that share task, model shape and batch
    schedule (the seeds and inits of one grid point) as one fused model in one Ray trial
    (embinit.sweep.fused); `off` (the default) runs one trial per Ray trial. A group holds at most
    `max_group` trials. Results, trial keys and MLflow runs are per trial either way."""

    fuse: Literal["auto", "off"] = "off"
    max_group: int = Field(8, ge=2, le=256)


class MlflowSettings(_Strict):
    tracking_uri: Annotated[str, AfterValidator(expand_env)] | None = None  # default sqlite:///mlflow.db
    experiment: str | None = None     # default: the spec's name
    log_checkpoint: bool = True       # the best checkpoint as artifact checkpoint/best.pt
    log_plots: bool = True


class ProbeAnalysis(_Strict):
    """The position-absorption probe (embinit.analysis.probe) on the trial's embedding table: at init,
    every `every_n_epochs` (None: never in between) and on the best epoch's weights at the end."""

    every_n_epochs: int | None = Field(None, ge=1)
    max_len: int | None = Field(None, ge=2)      # positions probed; None: the probe's default (64)
    n_samples: int = Field(20000, ge=10)


class SimilarityAnalysis(_Strict):
    """KNN match similarity of the trial's table during training (embinit.analysis.callbacks), against
    a fixed `reference` (checkpoint, embeddings file or MLflow run id), or against the snapshots of the
    same trial at `reference_seed` (the blog's two seeds). With `reference_seed` or `snapshot_dir` every
    trial writes its K-NN lists to `<snapshot_dir>/<trial key>/` (default snapshot_dir:
    `<cache_dir or .embinit-cache>/knn_snapshots`; it must be shared by all workers)."""

    every_n_steps: int = Field(500, ge=1)
    k: int = Field(10, ge=1)
    metric: Literal["jaccard", "overlap"] = "jaccard"      # embinit.analysis.similarity.SCORES
    neighbours: Literal["dot", "cosine"] = "dot"           # embinit.analysis.neighbours.NEIGHBOUR_METRICS
    reference: PathStr | None = None
    reference_seed: int | None = None
    snapshot_dir: PathStr | None = None
    wait_s: float = Field(0.0, ge=0)   # how long a trial waits for the reference seed's snapshot of a step

    @model_validator(mode="after")
    def _one_reference(self):
        if self.reference is not None and self.reference_seed is not None:
            raise ValueError("give either a fixed `reference` or a `reference_seed`, not both")
        if self.reference is None and self.reference_seed is None and self.snapshot_dir is None:
            raise ValueError("similarity needs a `reference`, a `reference_seed` or a `snapshot_dir`")
        return self


class Analyses(_Strict):
    """Analyses logged to each trial's MLflow run. They only observe training: they are passed beside
    the TrialConfig (not in it), so switching them on does not change trial keys and finished trials
    are reused without them."""

    probe: ProbeAnalysis | None = None
    similarity: SimilarityAnalysis | None = None

    @field_validator("probe", mode="before")
    @classmethod
    def _probe_flag(cls, v):
        if isinstance(v, bool):    # `probe: true` = the defaults, `probe: false` = off
            return {} if v else None
        return v


def _parse_init(spec: str | dict[str, Any]):
    """`embinit.init.parse_init_spec(spec)` (raises EmbinitError listing the valid names)."""
    from embinit.init import parse_init_spec  # the package pulls in torch
    return parse_init_spec(spec)


def _family_default(source: str) -> str | None:
    """The family's default location (a hub id for BERT/T5), None for file formats."""
    from embinit.init import SOURCES
    return SOURCES.get(source)


def init_string(spec: str | dict[str, Any]) -> str:
    """The canonical string form of an init spec (what `TrialConfig.init` holds): `glove+standardize`."""
    return str(_parse_init(spec))


def source_name(init: str | dict[str, Any] | None) -> str | None:
    """The pretrained source family an init spec draws from (e.g. "glove"), None for random inits."""
    if init is None:
        return None
    parsed = _parse_init(init)
    return parsed.source if parsed.is_pretrained else None


def init_label(init: str | dict[str, Any] | None) -> str:
    return _parse_init(init).label if init is not None else "?"


class InitEntry(_Strict):
    """One embedding init: a spec string or the init library's structured form, per side for
    translation (`tgt` = target/only table, `src` = source table; src None = same as tgt)."""

    tgt: str | dict[str, Any]
    src: str | dict[str, Any] | None = None
    pretrained: PathStr | None = None      # path/hub id for tgt's source (overrides the spec's)
    src_pretrained: PathStr | None = None
    label: str | None = None           # report label; default: the paper's label of tgt (and src)

    @classmethod
    def shorthand(cls, entry: Any) -> Any:
        if isinstance(entry, str):
            return {"tgt": entry}
        if isinstance(entry, dict) and not ({"tgt", "src"} & set(entry)):
            return {"tgt": entry}  # the init library's structured spec for the only/target side
        return entry

    @field_validator("tgt", "src")
    @classmethod
    def _valid_init(cls, v):
        if v is None:
            return v
        try:
            _parse_init(v)
        except EmbinitError as e:
            raise ValueError(str(e)) from None
        if isinstance(v, str) and not v.strip():
            raise ValueError("an init spec must not be empty")
        return v

    def tgt_str(self) -> str:
        return init_string(self.tgt)

    def src_str(self) -> str | None:
        return None if self.src is None else init_string(self.src)

    def side_option(self, side: str, name: str) -> Any:
        """An option (`pretrained`, `oov`, `lowercase`) given in a side's structured init spec."""
        spec = self.tgt if side == "tgt" else self.src
        return spec.get(name) if isinstance(spec, dict) else None

    def label_for(self, translation: bool = True) -> str:
        if self.label:
            return self.label
        tgt = init_label(self.tgt)
        if not translation or self.src is None:
            return tgt
        src = init_label(self.src)
        # The paper varies the target (English) table and keeps Xavier on the German side for GloVe.
        return tgt if src in (tgt, "Xavier") else f"{tgt}|src:{src}"


class PlannedTrial(BaseModel):
    """One expanded trial with the coordinates the report groups by."""

    config: dict[str, Any]
    key: str
    task: str
    label: str              # paper label, e.g. GloVe_Xavier (with the source side when it differs)
    axes: dict[str, Any]    # ablation axis values
    point: dict[str, Any]   # search-space values ({} without a search)
    seed: int


class ExperimentSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
    description: str = ""
    tasks: list[TaskEntry] = Field(min_length=1)
    inits: list[InitEntry] = Field(min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1)
    defaults: Hyperparams = Field(default_factory=Hyperparams)
    axes: dict[str, list[Any]] = Field(default_factory=dict)
    search: Search | None = None
    resources: Resources = Field(default_factory=Resources)
    max_concurrent: int | None = Field(None, ge=1)
    retries: int = Field(2, ge=0)
    data_dir: PathStr | None = None   # a root with one folder per task (like EMBINIT_DATA_DIR)
    pretrained: PathStr | dict[str, PathStr] | None = None  # a path, or {source family: path}
    cache_dir: PathStr | None = None
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings)
    analyses: Analyses | None = None
    execution: Execution = Field(default_factory=Execution)

    @field_validator("tasks", mode="before")
    @classmethod
    def _task_shorthand(cls, v):
        return [{"task": t} if isinstance(t, str) else t for t in v] if isinstance(v, list) else v

    @field_validator("inits", mode="before")
    @classmethod
    def _init_shorthand(cls, v):
        return [InitEntry.shorthand(e) for e in v] if isinstance(v, list) else v

    @field_validator("seeds", mode="before")
    @classmethod
    def _seed_count(cls, v):
        if isinstance(v, int) and not isinstance(v, bool):
            if v < 1:
                raise ValueError(f"a seed count must be >= 1, got {v}")
            return list(range(v))
        return v

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"seeds must be distinct, got {v}")
        return v

    @model_validator(mode="after")
    def _cross_checks(self):
        problems = _cross_check(self)
        if problems:
            raise SpecError(problems)
        return self

    # ---- expansion --------------------------------------------------------------------------------
    def search_points(self) -> list[dict[str, Any]]:
        """Grid search points ([{}] without a grid search; Optuna points are drawn at run time)."""
        if self.search is None or self.search.method != "grid":
            return [{}]
        keys = list(self.search.space)
        return [dict(zip(keys, combo)) for combo in itertools.product(*self.search.space.values())]

    def axis_points(self) -> list[dict[str, Any]]:
        keys = list(self.axes)
        return [dict(zip(keys, combo)) for combo in itertools.product(*self.axes.values())]

    def plan(self) -> list[PlannedTrial]:
        """Every trial: tasks x inits x axes x search points x seeds, in that nesting order."""
        out = []
        for task, init, axes, point, seed in itertools.product(
                self.tasks, self.inits, self.axis_points(), self.search_points(), self.seeds):
            cfg = self.trial_config(task, init, seed, {**axes, **point})
            out.append(PlannedTrial(config=cfg.to_dict(), key=cfg.key(), task=task.task,
                                    label=init.label_for(_is_translation(task.task)), axes=axes,
                                    point=point, seed=seed))
        return out

    def expand(self) -> list[TrialConfig]:
        return [TrialConfig.from_dict(p.config) for p in self.plan()]

    def num_trials(self) -> int:
        """Planned trial count (for Optuna: the budget x seeds per scientific point)."""
        per_point = self.search.num_samples if self.search and self.search.method == "optuna" else 1
        return len(self.plan()) * per_point

    def trial_config(self, task: TaskEntry, init: InitEntry, seed: int,
                     overrides: dict[str, Any] | None = None) -> TrialConfig:
        values: dict[str, Any] = {"threads": max(1, int(self.resources.cpus))}
        values.update(self.defaults.set_values())
        values.update({k: v for k, v in task.set_values().items() if k not in ("task", "data_dir")})
        values.update(overrides or {})
        if init.side_option("tgt", "oov"):
            values.setdefault("oov", init.side_option("tgt", "oov"))
        two_sided = init.src is not None and _is_translation(task.task)
        tgt_path = init.pretrained or spec_path(init.side_option("tgt", "pretrained"))
        src_path = init.src_pretrained or spec_path(init.side_option("src", "pretrained"))
        return TrialConfig(task=task.task, init=init.tgt_str(), seed=seed,
                           src_init=init.src_str() if two_sided else None,
                           pretrained=self._pretrained_for(init.tgt, tgt_path),
                           src_pretrained=(self._pretrained_for(init.src, src_path)
                                           if two_sided else None),
                           data_dir=self._data_dir(task), **values)

    def _pretrained_for(self, init: str | dict | None, explicit: str | None) -> str | None:
        """Path of a side's source: the entry's own, else the spec's (per source family), else the
        family's default (a hub id for BERT/T5, None for file formats)."""
        source = source_name(init)
        if explicit is not None or source is None:
            return explicit
        if isinstance(self.pretrained, dict):
            return self.pretrained.get(source, _family_default(source))
        return self.pretrained or _family_default(source)

    def _data_dir(self, task: TaskEntry) -> str | None:
        if task.data_dir is not None:
            return task.data_dir
        if self.data_dir is None or task.task.startswith("synthetic"):
            return None
        return str(Path(self.data_dir) / task.task)

    def tracking_uri(self, override: str | None = None) -> str:
        return override or self.mlflow.tracking_uri or "sqlite:///mlflow.db"

    def experiment_name(self) -> str:
        return self.mlflow.experiment or self.name

    def paths(self) -> list[tuple[str, str]]:
        """(field path, filesystem path) of every data/pretrained path, for callers that confine them."""
        out = [("data_dir", self.data_dir), ("cache_dir", self.cache_dir)]
        if isinstance(self.pretrained, dict):
            out += [(f"pretrained.{k}", v) for k, v in self.pretrained.items()]
        else:
            out.append(("pretrained", self.pretrained))
        out += [(f"tasks[{i}].data_dir", t.data_dir) for i, t in enumerate(self.tasks)]
        out += [(f"tasks[{i}].tokenizer", t.tokenizer) for i, t in enumerate(self.tasks)]
        out.append(("defaults.tokenizer", self.defaults.tokenizer))
        for i, e in enumerate(self.inits):
            out += [(f"inits[{i}].pretrained", e.pretrained), (f"inits[{i}].src_pretrained", e.src_pretrained)]
        sim = self.analyses.similarity if self.analyses is not None else None
        if sim is not None:
            out += [("analyses.similarity.reference", sim.reference),
                    ("analyses.similarity.snapshot_dir", sim.snapshot_dir)]
        return [(k, v) for k, v in out if v]

    def canonical(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if data.get("analyses") is None:
            data.pop("analyses", None)   # specs without analyses keep the hash they had before the field
        if data.get("execution") == Execution().model_dump(mode="json"):
            data.pop("execution", None)  # likewise for the default (separate) execution
        return data

    def spec_hash(self) -> str:
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.canonical(), sort_keys=False)


def _is_translation(task: str) -> bool:
    return TASKS[task].kind == "translation"


def _check_values(where: str, name: str, values: list[Any]) -> list[tuple[str, str]]:
    """Each value of an axis/search list must be a valid value of hyperparameter `name`."""
    if name not in HYPERPARAMETERS:
        return [(where, f"{name!r} is not a hyperparameter; choose from {sorted(HYPERPARAMETERS)}")]
    out = []
    for i, value in enumerate(values):
        try:
            Hyperparams.model_validate({name: value})
        except ValidationError as e:
            out.append((f"{where}[{i}]", f"{e.errors()[0]['msg'].removeprefix('Value error, ')}, "
                                         f"got {value!r}"))
    return out


def _side_problems(spec: "ExperimentSpec", i: int, init: InitEntry,
                   translation: bool) -> list[tuple[str, str]]:
    """A pretrained side needs a source path (file formats have no default); options the trial
    config cannot carry are refused rather than silently dropped."""
    out = []
    sides = [("tgt", init.tgt, init.pretrained)]
    if init.src is not None and translation:
        sides.append(("src", init.src, init.src_pretrained))
    for side, value, explicit in sides:
        where = f"inits[{i}].{side}" if init.src is not None else f"inits[{i}]"
        source = source_name(value)
        path = explicit or init.side_option(side, "pretrained")
        if source and spec._pretrained_for(value, path) is None:
            out.append((where, f"{source!r} needs a pretrained file: set `pretrained: {{{source}: PATH}}` "
                               "in the spec or `pretrained` on this init"))
        if init.side_option(side, "lowercase"):
            out.append((where + ".lowercase", "lowercase lookup cannot be set per init in a spec yet"))
    return out


def _heads_problems(spec: "ExperimentSpec") -> list[tuple[str, str]]:
    """An init without a pretrained source on any side (all-Xavier) gets D from `d_model` or the task
    default, not from a file; heads set explicitly must divide that D, or every such trial fails at start."""
    out = []
    for i, task in enumerate(spec.tasks):
        for j, init in enumerate(spec.inits):
            sides = [init.tgt] + ([init.src] if init.src is not None and _is_translation(task.task) else [])
            if any(source_name(v) for v in sides):
                continue
            cfg = spec.trial_config(task, init, spec.seeds[0])
            d_model = cfg.d_model or TASKS[task.task].d_model
            if task.heads is not None and d_model % cfg.heads:
                out.append((f"tasks[{i}].heads", f"heads={cfg.heads} does not divide d_model={d_model}, the D of "
                            f"inits[{j}] ({init.label_for(_is_translation(task.task))}, no pretrained file to take "
                            "D from); set `d_model` on the task"))
                break
    return out


def _cross_check(spec: "ExperimentSpec") -> list[tuple[str, str]]:
    """Problems that involve more than one field (each field alone is valid)."""
    problems: list[tuple[str, str]] = []
    for name, values in spec.axes.items():
        if not values:
            problems.append((f"axes.{name}", "an axis needs at least one value"))
        problems += _check_values(f"axes.{name}", name, values)
    if spec.search is not None:
        for name, values in spec.search.space.items():
            where = f"search.space.{name}"
            if name in spec.axes:
                problems.append((where, f"{name!r} is both an ablation axis and searched; pick one"))
            if isinstance(values, list):
                problems += _check_values(where, name, values)
            elif name not in HYPERPARAMETERS:
                problems += _check_values(where, name, [])
    translation = any(_is_translation(t.task) for t in spec.tasks)
    seen: dict[Any, int] = {}
    for i, init in enumerate(spec.inits):
        if init.src is not None and not translation:
            problems.append((f"inits[{i}].src", "only translation tasks have a source side; tasks "
                             f"{[t.task for t in spec.tasks]} have one embedding table"))
        problems += _side_problems(spec, i, init, translation)
        label = init.label_for(translation)
        # Two entries that compute the same trials (same key for some task) would train and report
        # one thing twice, e.g. `glove` and `{source: glove, name: X}` with the same file.
        same = [("key", t.task, spec.trial_config(t, init, spec.seeds[0]).key()) for t in spec.tasks]
        for other in (*same, ("label", label)):
            if other in seen:
                why = ("remove it or give it its own `label`" if other[0] == "label"
                       else "remove it: it trains the same trials")
                problems.append((f"inits[{i}]", f"duplicates inits[{seen[other]}] (label {label!r}); {why}"))
                break
        for other in (*same, ("label", label)):
            seen.setdefault(other, i)
    sim = spec.analyses.similarity if spec.analyses is not None else None
    if sim is not None and sim.reference_seed is not None and sim.reference_seed not in spec.seeds:
        problems.append(("analyses.similarity.reference_seed", f"seed {sim.reference_seed} is not one of "
                         f"the spec's seeds {spec.seeds}, so no trial would write its snapshots"))
    problems += _heads_problems(spec)
    problems += _execution_problems(spec)
    tasks = [t.task for t in spec.tasks]
    for i, t in enumerate(tasks):
        if t in tasks[:i]:
            problems.append((f"tasks[{i}]", f"task {t!r} is listed twice"))
    return problems


def _execution_problems(spec: "ExperimentSpec") -> list[tuple[str, str]]:
    """Fused execution trains whole grid groups at once; what needs one trial at a time is refused."""
    if spec.execution.fuse == "off":
        return []
    out = []
    if spec.search is not None and spec.search.method == "optuna":
        out.append(("execution.fuse", "fuse: auto groups the trials of a grid; an optuna search draws its "
                                      "points one at a time: use fuse: off"))
    if spec.analyses is not None:
        out.append(("execution.fuse", "analyses observe one trial's model during training and do not run "
                                      "on fused groups yet: use fuse: off or drop `analyses`"))
    return out


_BRANCHES = {"Range", "str", "int", "float", "bool", "list", "dict"}


def _loc(loc: tuple) -> tuple[str, bool]:
    """(dotted path, whether the error came from one branch of a union type)."""
    out, branch = "", False
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or part in _BRANCHES:
            branch = True  # pydantic names union branches inside locations; users never see them
        else:
            out += f".{part}" if out else str(part)
    return out, branch


def _problems(err: ValidationError) -> list[tuple[str, str]]:
    found = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = f"unknown field {e['loc'][-1]!r}"
        elif e["type"] != "value_error" and not isinstance(e.get("input"), (dict, list, type(None))):
            msg = f"{msg}, got {e['input']!r}"
        path, branch = _loc(e["loc"])
        last = e["loc"][-1] if e["loc"] else ""
        at_branch = branch and isinstance(last, str) and ("[" in last or last in _BRANCHES)
        found.append((path, msg, at_branch and e["type"].endswith("_type")))
    # A union's "wrong type" error is noise when another branch explains the problem at the same path.
    explained = {p for p, _, noise in found if not noise}
    out = [(p, m) for p, m, noise in found
           if not (noise and any(q == p or q.startswith((p + ".", p + "[")) for q in explained))]
    return list(dict.fromkeys(out))


def yaml_error(e: yaml.YAMLError, where: str = "") -> str:
    """One line that keeps where the parser stopped: `line 4, column 4: expected <block end>, but found
    ... (while parsing a block collection at line 3, column 3)`; `where` names the file, if any."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or not problem:
        return f"not valid YAML{where}: {(str(e).splitlines() or [type(e).__name__])[0]}"
    text = f"not valid YAML{where} at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, at = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context:
        text += f" ({context}" + (f" at line {at.line + 1}, column {at.column + 1})" if at else ")")
    return text


def _read(source: Any) -> tuple[dict[str, Any], Path | None]:
    """(raw spec data, the folder of the file it came from or None)."""
    if isinstance(source, ExperimentSpec):
        return source.canonical(), None
    if isinstance(source, dict):
        return source, None
    text, base, where = None, None, ""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and source.strip().endswith((".yaml", ".yml", ".json"))):
        path = Path(source).expanduser()
        base, where = path.resolve().parent, f" in {str(path)!r}"
        try:
            text = path.read_text()
        except OSError as e:
            raise SpecError([("", f"cannot read spec file {str(path)!r}: {e.strerror}")]) from None
    elif isinstance(source, str):
        text = source
    else:
        raise SpecError([("", f"a spec must be a mapping, YAML text or a file path, got {type(source).__name__}")])
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError([("", yaml_error(e, where))]) from None
    if not isinstance(data, dict):
        raise SpecError([("", f"a spec must be a mapping at the top level, got {type(data).__name__}")])
    return data, base


def load_spec(source: Any) -> ExperimentSpec:
    """A validated spec from a dict, YAML/JSON text, a file path or a spec; raises SpecError listing
    every problem."""
    data, base = _read(source)
    try:
        return ExperimentSpec.model_validate(data, context={"base_dir": base})
    except ValidationError as e:
        raise SpecError(_init_paths(_problems(e), data)) from None
    except SpecError as e:
        raise SpecError(_init_paths(e.problems, data)) from None


_FIELD_OF = {"registered transform": "transform", "registered init": "source", "oov rule": "oov",
             "no 'source'": "source"}


def _init_paths(problems: list[tuple[str, str]], data: dict[str, Any]) -> list[tuple[str, str]]:
    """Paths as the user wrote the init: `inits[2]` for a shorthand string, `inits[2].transform` for a
    structured spec whose transform is wrong (not the internal `inits[2].tgt`)."""
    raw = data.get("inits") if isinstance(data.get("inits"), list) else []
    out = []
    for path, msg in problems:
        m = re.match(r"^inits\[(\d+)\]\.(tgt|src)(.*)$", path)
        if m and int(m.group(1)) < len(raw):
            entry = raw[int(m.group(1))]
            written = isinstance(entry, dict) and ({"tgt", "src"} & set(entry))
            path = path if written else f"inits[{m.group(1)}]{m.group(3)}"
            side_value = entry.get(m.group(2)) if written else entry
            if isinstance(side_value, dict) and not m.group(3):
                field = next((f for k, f in _FIELD_OF.items() if k in msg), None)
                path = f"{path}.{field}" if field else path
        out.append((path, msg))
    return out
