"""The spec's building blocks: fixed hyperparameters, tasks, search, resources, execution, MLflow and
analyses settings. Every model forbids unknown fields and infinite/NaN floats."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from embinit.bounds import field_limits
from embinit.config import HYPERPARAMETERS, PRECISIONS
from embinit.errors import unknown_name
from embinit.init.registry import OOV_INFO
from embinit.spec.path_fields import PathStr, expand_env
from embinit.task_registry import TASKS


# An experiment's name, also the MLflow experiment it logs to: one plain path component (its artifacts
# live in a folder of that name), so `../x` or `a/b` cannot place them elsewhere.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # no float field means inf or NaN


class Hyperparams(_Strict):
    """Fixed hyperparameters (None = the task's Table 5 default). Names are `TrialConfig` fields; the
    bounds of the numeric ones are embinit.bounds.BOUNDS'."""

    data_seed: int | None = Field(None, **field_limits("data_seed"))  # one data order for all seeds (KNN post, exp. 1)
    emb_seed: int | None = Field(None, **field_limits("emb_seed"))  # the tables' init only (KNN post)
    init_from: PathStr | None = None            # a checkpoint whose non-embedding weights start the model
    epochs: int | None = Field(None, **field_limits("epochs"))
    batch_size: int | None = Field(None, **field_limits("batch_size"))
    max_tokens: int | None = Field(None, **field_limits("max_tokens"))
    lr: float | None = Field(None, **field_limits("lr"))
    d_model: int | None = Field(None, **field_limits("d_model"))
    layers: int | None = Field(None, **field_limits("layers"))
    heads: int | None = Field(None, **field_limits("heads"))
    ff_dim: int | None = Field(None, **field_limits("ff_dim"))
    dropout: float | None = Field(None, **field_limits("dropout"))
    attention_dropout: float | None = Field(None, **field_limits("attention_dropout"))   # on attention weights
    activation_dropout: float | None = Field(None, **field_limits("activation_dropout"))  # inside feed-forward
    min_freq: int | None = Field(None, **field_limits("min_freq"))
    max_len: int | None = Field(None, **field_limits("max_len"))
    pe_base: float | None = Field(None, **field_limits("pe_base"))
    pe_positions: int | None = Field(None, **field_limits("pe_positions"))  # PE rows (model, statistics)
    pre_ln: bool | None = None
    pos_encoding: bool | None = None
    train_embeddings: bool | None = None
    freeze_non_embeddings: bool | None = None
    tie_embeddings: bool | None = None   # LM only: output layer = the token table (GPT-2 style)
    early_stopping_patience: int | None = Field(None, **field_limits("early_stopping_patience"))
    max_train_examples: int | None = Field(None, **field_limits("max_train_examples"))
    beam_size: int | None = Field(None, **field_limits("beam_size"))
    length_penalty: float | None = Field(None, **field_limits("length_penalty"))   # beam search's alpha
    precision: Literal[PRECISIONS] | None = None
    oov: str | None = None
    tokenizer: PathStr | None = None   # spacy | gpt2 | whitespace | a HF model folder or hub id
    threads: int | None = Field(None, **field_limits("threads"))
    device: str | None = None
    cuda_graphs: bool | None = None   # translation on CUDA: the training step in CUDA graphs (embinit.train.graphed)
    extras: dict[str, Any] | None = None

    @field_validator("oov")
    @classmethod
    def _known_oov(cls, v: str | None) -> str | None:
        if v is not None and v not in OOV_INFO:   # else found only when a pretrained table is built
            raise ValueError(str(unknown_name("oov rule", v, OOV_INFO)))
        return v

    def set_values(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class TaskEntry(Hyperparams):
    """One task with its fixed hyperparameters; a bare task name in YAML means all defaults."""

    # the spec's `define_tasks` entry of `task`, put here by the spec; before `task`, which is checked against it
    definition: dict[str, Any] | None = None
    task: str = Field(min_length=1)
    data_dir: PathStr | None = None  # the task's own data folder (Multi30k's train.de, ...)
    # the commit, tag or branch of the task's hub dataset read (a task without data_dir); None: main
    data_revision: str | None = None

    @field_validator("data_revision")
    @classmethod
    def _revision(cls, v: str | None) -> str | None:
        from embinit.hf_cache import pin_problem
        if v is not None and (problem := pin_problem(v)) is not None:
            raise ValueError(problem)
        return v

    @field_validator("task")
    @classmethod
    def _known_task(cls, v: str, info: ValidationInfo) -> str:
        from embinit.task_registry import DEFINED
        definition = info.data.get("definition")
        if definition is None and (v not in TASKS or v in DEFINED):
            builtin = {t: e for t, e in TASKS.items() if t not in DEFINED}
            raise ValueError(str(unknown_name("task", v, builtin)) + " (or define it in define_tasks)")
        if definition is not None:   # the checks across fields read the registry by name
            from embinit import task_defs
            if not task_defs.problems(v, definition):   # else define_tasks lists them
                task_defs.ensure(v, definition)
        return v

    def set_values(self) -> dict[str, Any]:
        return {k: v for k, v in super().set_values().items() if k != "definition"}



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


def as_typed(name: str, values: list[Any]) -> list[Any]:
    """Axis or search values as a trial will get them: each valid value of hyperparameter `name` in its
    field's type, coerced as a fixed value is (`"false"` -> False, `"1e-3"` -> 0.001); a value was passed on
    as written, so `train_embeddings: ["false"]` trained the embeddings. Invalid ones stay as they are, for
    the checks to report; names that are not hyperparameters (the init axes) are left alone."""
    if name not in Hyperparams.model_fields:
        return values
    return [typed_value(name, value)[0] for value in values]


def typed_value(name: str, value: Any) -> tuple[Any, str | None]:
    """(`value` as hyperparameter `name`'s field types it, None), or (`value` as written, why it is not a
    valid value of it): the one rule `as_typed` and the spec checks (`checks._check_values`) share."""
    try:
        return getattr(Hyperparams.model_validate({name: value}), name), None
    except ValidationError as e:
        return value, e.errors()[0]["msg"].removeprefix("Value error, ")


DRAWN = "optuna"   # the search method whose points are drawn while the sweep runs (not planned)


class Search(_Strict):
    """Nuisance hyperparameters searched per (task, init, axes) point; each point runs every seed and
    the point with the best mean `metric` is the one reported."""

    method: Literal["grid", "optuna"] = "grid"
    space: dict[str, list[Any] | Range] = Field(min_length=1)
    num_samples: int | None = Field(None, ge=1, validate_default=True)  # optuna: points per group
    metric: str | None = None   # default: the task's selection metric, e.g. val/acc_matched
    mode: Literal["min", "max"] | None = None

    @field_validator("space", mode="before")
    @classmethod
    def _one_value(cls, space: Any) -> Any:
        """`lr: 1e-3` failed both shapes a value may take, as two problems that named an internal class ('a
        valid list', 'a valid dictionary or instance of Range'): one problem, with the forms it may take."""
        if not isinstance(space, dict):
            return space
        bad = [f"{k}: one value ({v!r}), not a list: a grid takes a list of values ({k}: [{v!r}]), optuna a list "
               f"or a range ({k}: {{low: ..., high: ...}})"
               for k, v in space.items() if not isinstance(v, (list, dict, Range))]
        if bad:
            raise ValueError("; ".join(bad))
        return space

    @field_validator("space")
    @classmethod
    def _values(cls, space, info: ValidationInfo):
        problems = [f"{k} is an empty list" for k, v in space.items() if isinstance(v, list) and not v]
        if info.data.get("method") == "grid":
            problems += [f"{k}: grid search needs a list of values, got a range"
                         for k, v in space.items() if isinstance(v, Range)]
        if problems:
            raise ValueError("; ".join(problems))
        return {k: as_typed(k, v) if isinstance(v, list) else v for k, v in space.items()}

    @field_validator("num_samples")
    @classmethod
    def _budget(cls, n, info: ValidationInfo):
        if n is None and info.data.get("method") == DRAWN:
            raise ValueError("optuna search needs a trial budget (num_samples)")
        return n

    @property
    def drawn(self) -> bool:
        """Whether its points are drawn while the sweep runs (Optuna), not planned (a grid)."""
        return self.method == DRAWN


class Resources(_Strict):
    cpus: float = Field(1.0, gt=0)
    gpus: float = Field(0.0, ge=0)


class Execution(_Strict):
    """How trials run. `fuse: always` trains each group of trials that share task, model shape and batch
    schedule (the seeds and inits of one grid point; the seeds of one Optuna point) as one fused model
    in one Ray trial (embinit.sweep.fused); `auto` does so where it can pay, for trials on GPUs
    (`resources.gpus` > 0), and runs CPU trials separately (on CPU fusing at best breaks even, and a
    group of several data orders pads: 1.6-2.2x the token slots on SST-2, docs/benchmarks.md); `off`
    (the default) runs one trial per Ray trial. A group holds at most `max_group` trials. Results,
    trial keys and MLflow runs are per trial either way.

    `trainer: noop` trains nothing: each trial records its epochs of made-up metrics at once, through
    the real scheduling, dedup and MLflow path (embinit.sweep.noop), to measure the control plane. Its
    numbers mean nothing: give such a spec an MLflow experiment of its own.

    `trials_per_unit` (grid, fuse off): one Ray Tune trial runs up to that many trials in turn. Tune costs
    about 0.1-0.3 s per Tune trial (bench/bench_control_plane.py): worth paying once per unit, not once
    per trial, when trials take seconds. A unit whose worker died restarts; the trials it finished are
    reused."""

    fuse: Literal["auto", "always", "off"] = "off"
    max_group: int = Field(8, ge=2, le=256)
    trainer: Literal["torch", "noop"] = "torch"
    trials_per_unit: int = Field(1, ge=1, le=10_000)

    def fuses(self, gpus: float) -> bool:
        """Whether trials asking for `gpus` each train in fused groups."""
        return self.fuse == "always" or (self.fuse == "auto" and gpus > 0)

    @field_validator("fuse", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: Any) -> Any:
        """YAML reads `fuse: off` (as the default is spelled) as false, and `on`/`yes`/`true` as true (auto)."""
        return {True: "auto", False: "off"}[value] if isinstance(value, bool) else value


class MlflowSettings(_Strict):
    tracking_uri: Annotated[str, AfterValidator(expand_env)] | None = None  # default sqlite:///mlflow.db
    experiment: str | None = Field(None, pattern=NAME_PATTERN)  # default: the spec's name
    log_checkpoint: bool = True       # the best checkpoint as artifact checkpoint/best.pt
    log_plots: bool = True
    # per-example outputs of the best checkpoint as artifacts outputs/ (test translations and references;
    # a classifier's dev predictions and labels): ~0.1 MB per Multi30k trial
    log_outputs: bool = True


class ProbeAnalysis(_Strict):
    """The position-absorption probe (embinit.analysis.probe) on the trial's embedding table: at init,
    every `every_n_epochs` (None: never in between) and on the best epoch's weights at the end."""

    every_n_epochs: int | None = Field(None, ge=1)
    max_len: int | None = Field(None, ge=2)      # positions probed; None: the probe's default (64)
    n_samples: int = Field(20000, ge=10)


Score = Literal["jaccard", "overlap"]


class SimilarityAnalysis(_Strict):
    """KNN match similarity of the trial's table during training (embinit.analysis.similarity_callback), against
    a fixed `reference` (checkpoint, embeddings file or MLflow run id), or against the snapshots of the
    same trial at `reference_seed`, or at `reference_emb_seed` (the same trial with another embedding
    seed only: the blog's code). With either or `snapshot_dir` every trial writes its K-NN lists to
    `<snapshot_dir>/<trial key>/` (default snapshot_dir: `<cache_dir or .embinit-cache>/knn_snapshots`;
    it must be shared by all workers). `metric` is one score or a list (all logged, the first plotted):
    `jaccard` |∩|/|∪| (the post's formula), `overlap` |∩|/K (the post's code and its published numbers)."""

    every_n_steps: int = Field(500, ge=1)
    k: int = Field(10, ge=1)
    metric: Score | list[Score] = "jaccard"                # embinit.analysis.similarity.SCORES
    neighbours: Literal["dot", "cosine"] = "dot"           # embinit.analysis.neighbours.NEIGHBOUR_METRICS
    reference: PathStr | None = None
    reference_seed: int | None = Field(None, **field_limits("seed"))
    reference_emb_seed: int | None = Field(None, **field_limits("emb_seed"))
    snapshot_dir: PathStr | None = None
    wait_s: float = Field(0.0, ge=0)   # how long a trial waits for the reference seed's snapshot of a step

    @model_validator(mode="after")
    def _one_reference(self):
        given = [name for name in ("reference", "reference_seed", "reference_emb_seed")
                 if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of a fixed `reference`, a `reference_seed` or a `reference_emb_seed`, "
                             f"not both (got {' and '.join(given)})")
        if not given and self.snapshot_dir is None:
            raise ValueError("similarity needs a `reference`, a `reference_seed`, a `reference_emb_seed` "
                             "or a `snapshot_dir`")
        if isinstance(self.metric, list) and (not self.metric or len(set(self.metric)) < len(self.metric)):
            raise ValueError(f"metric lists distinct scores, at least one; got {self.metric}")
        return self


class Analyses(_Strict):
    """Analyses logged to each trial's MLflow run. They only observe training: they are passed beside
    the TrialConfig (not in it), so switching them on does not change trial keys and finished trials
    are reused without them. One field per entry of the registry embinit.analysis.callbacks.ANALYSES,
    whose maker takes the field's model (tests/test_analysis_contract.py checks that the two agree)."""

    probe: ProbeAnalysis | None = None
    similarity: SimilarityAnalysis | None = None

    @field_validator("probe", mode="before")
    @classmethod
    def _probe_flag(cls, v):
        if isinstance(v, bool):    # `probe: true` = the defaults, `probe: false` = off
            return {} if v else None
        return v




# The spec's hyperparameters are TrialConfig's (embinit.config.HYPERPARAMETERS); Hyperparams adds their
# bounds. A field on one side only would be silently dropped or refused, so the two must agree.
if set(Hyperparams.model_fields) != set(HYPERPARAMETERS):
    raise TypeError(f"spec Hyperparams and TrialConfig disagree: "
                    f"{sorted(set(Hyperparams.model_fields) ^ set(HYPERPARAMETERS))}")
