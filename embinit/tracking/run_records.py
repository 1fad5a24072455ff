"""Sweep runs, analysis runs and metric histories read back from MLflow as frozen values, as
`embinit.tracking.records` reads trial runs. `embinit.tracking.run_readers` searches the store and builds
them; the report and the reproduction read these, never MLflow's `Run` objects. This module imports neither MLflow nor
torch.

An analogy run's payload (`AnalogyRun`: its Table-4 rows, ratio sweep and params) is declared here
once: `embinit.tracking.run_writers.log_analogy_run` writes it (params, `analogy/<slug>/...` metrics,
`result.json`) and `embinit.tracking.run_readers.analogy_run` reads it back. Rows are named by their slug.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from embinit.tracking.records import KIND_TAG, N_TRIALS_TAG, SPEC_HASH_TAG, SPEC_NAME_TAG

if TYPE_CHECKING:
    from embinit.spec import ExperimentSpec

SPEC_ARTIFACT = "spec.yaml"   # a sweep run's spec, as `ExperimentSpec.to_yaml` wrote it when the sweep started


@dataclass(frozen=True)
class SweepRecord:
    """One sweep's (parent) run. `status` is MLflow's (RUNNING | FINISHED | FAILED | KILLED); `tags`
    holds all the run's tags (its provenance: `embinit.tracking.provenance.read`)."""

    run_id: str
    experiment_id: str
    name: str
    status: str
    spec_hash: str | None
    n_trials: str | None       # the planned count, as tagged
    start_ms: int = 0
    end_ms: int | None = None
    artifact_uri: str = ""
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def spec_name(self) -> str:
        """The name of the spec it ran: its `embinit.spec_name` tag; a sweep run from before the tag was
        named after its spec alone, so its name."""
        return self.tags.get(SPEC_NAME_TAG) or self.name


@dataclass(frozen=True)
class StoredSpec:
    """The spec a sweep run recorded (its `spec.yaml` artifact): the text as written, and the spec it
    loads as in this version of embinit; `spec` is None, and `problem` says why, when it no longer loads
    (a spec written by another version, or text that is not a spec)."""

    text: str
    spec: ExperimentSpec | None
    problem: str | None = None


@dataclass(frozen=True)
class AnalysisRecord:
    """One analysis run outside a sweep (`embinit.tracking.run_writers.log_analysis_run`, e.g. kind `analogy`)."""

    run_id: str
    kind: str
    name: str
    status: str
    start_ms: int = 0
    end_ms: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    artifact_uri: str = ""
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricHistory:
    """One metric of one run: one value per step, sorted by step. A step logged more than once (a
    resumed trial re-logs the epochs after its checkpoint) keeps the value logged last."""

    run_id: str
    metric: str
    points: tuple[tuple[int, float], ...] = ()

    @property
    def by_step(self) -> dict[int, float]:
        return dict(self.points)

    @property
    def steps(self) -> set[int]:
        return {step for step, _ in self.points}


def analogy_slug(steps: Sequence[str]) -> str:
    """The name of a Table-4 row: its transform steps joined by '.', 'raw' for none (MLflow metric names
    allow no '+'). Rows of different analogy runs are matched by it."""
    return ".".join(steps) or "raw"


def analogy_metrics(result: dict[str, Any], prefix: str) -> dict[str, float]:
    """The MLflow metrics of one analogy result (`AnalogyResult.to_dict()`): counts and percentages
    under `prefix`; a group without questions is left out."""
    out = {f"{prefix}/correct": float(result["correct"]), f"{prefix}/total": float(result["total"])}
    for name, acc in (("acc", result.get("accuracy")), ("semantic_acc", (result.get("semantic") or {}).get("accuracy")),
                      ("syntactic_acc", (result.get("syntactic") or {}).get("accuracy"))):
        if acc is not None:
            out[f"{prefix}/{name}"] = float(acc)
    return out


_ROW_FIELDS = ("steps", "slug", "label", "correct", "total", "accuracy", "paper", "pe_ratio")


@dataclass(frozen=True)
class AnalogyRow:
    """One row of an analogy run: a transform chain (`steps`) and its 3CosAdd counts. `accuracy` is a
    percentage, None without applicable questions; `paper` the paper's value where it gives one;
    `pe_ratio` σ(words)/σ(PE) where the chain adds encodings; `detail` the rest of the analysis result
    (oov, vocab_size, semantic, syntactic, sections), kept as logged."""

    steps: tuple[str, ...]
    label: str
    correct: int
    total: int
    accuracy: float | None
    paper: str | None = None
    pe_ratio: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        return analogy_slug(self.steps)

    @classmethod
    def of(cls, steps: Sequence[str], result: dict[str, Any], paper: str | None = None,
           pe_ratio: float | None = None) -> "AnalogyRow":
        """The row of an analysis result's dict (`embinit.analysis.analogy.AnalogyResult.to_dict()`)."""
        return cls.from_json({**result, "steps": list(steps), "paper": paper, "pe_ratio": pe_ratio})

    def metrics(self) -> dict[str, float]:
        """`analogy/<slug>/correct`, `/total`, `/acc`, `/semantic_acc`, `/syntactic_acc`, `/pe_ratio`."""
        prefix = f"analogy/{self.slug}"
        out = analogy_metrics({**self.detail, "correct": self.correct, "total": self.total,
                               "accuracy": self.accuracy}, prefix)
        return out | ({f"{prefix}/pe_ratio": float(self.pe_ratio)} if self.pe_ratio is not None else {})

    def to_json(self) -> dict[str, Any]:
        return {**self.detail, "label": self.label, "correct": self.correct, "total": self.total,
                "accuracy": self.accuracy, "steps": list(self.steps), "slug": self.slug, "paper": self.paper,
                "pe_ratio": self.pe_ratio}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "AnalogyRow":
        """A row as `to_json` wrote it (a ValueError names what is wrong)."""
        if not isinstance(data, dict):
            raise ValueError(f"a row is not an object: {data!r:.80}")
        missing = [k for k in ("steps", "label", "correct", "total") if k not in data]
        if missing:
            raise ValueError(f"a row lacks {', '.join(missing)}: {data!r:.120}")
        steps = data["steps"]
        if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
            raise ValueError(f"a row's steps are not a list of names: {steps!r:.80}")
        try:
            return cls(tuple(steps), str(data["label"]), int(data["correct"]), int(data["total"]),
                       _number(data.get("accuracy")), data.get("paper"), _number(data.get("pe_ratio")),
                       {k: v for k, v in data.items() if k not in _ROW_FIELDS})
        except (TypeError, ValueError) as e:
            raise ValueError(f"row {analogy_slug(steps)!r}: {e}") from None


def _number(x: Any) -> float | None:
    return None if x is None else float(x)


@dataclass(frozen=True)
class AnalogyRun:
    """What an analogy run records (`embinit analogy --log-experiment`): its rows, named by slug, the
    ratio sweep (`embinit.analysis.table4.ratio_sweep`, rows {ratio, correct, total, accuracy}) and the
    params it ran with (its `seed` is the random positions'). `run_id`/`name` are set when read back."""

    rows: tuple[AnalogyRow, ...]
    params: dict[str, Any] = field(default_factory=dict)
    ratio_sweep: tuple[dict[str, Any], ...] = ()
    run_id: str = ""
    name: str = ""

    @property
    def seed(self) -> Any:
        return self.params.get("seed")

    def row(self, slug: str) -> AnalogyRow | None:
        """The row named `slug`, None when this run has none (e.g. one logged without --table4)."""
        return next((r for r in self.rows if r.slug == slug), None)

    def metrics(self) -> dict[str, float]:
        return {k: v for row in self.rows for k, v in row.metrics().items()}

    def to_json(self) -> dict[str, Any]:
        """result.json's layout: {rows: [...], ratio_sweep: [...], params: {...}}."""
        return {"rows": [r.to_json() for r in self.rows], "ratio_sweep": list(self.ratio_sweep),
                "params": self.params}

    @classmethod
    def from_json(cls, data: Any, run_id: str = "", name: str = "") -> "AnalogyRun":
        """A result.json as `to_json` wrote it (a ValueError names what is wrong)."""
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError("not an object with a list of rows")
        sweep, params = data.get("ratio_sweep") or [], data.get("params") or {}
        if not isinstance(sweep, list) or not all(isinstance(x, dict) for x in sweep) or not isinstance(params, dict):
            raise ValueError("its ratio_sweep is not a list of objects or its params not an object")
        return cls(tuple(AnalogyRow.from_json(r) for r in data["rows"]), params, tuple(sweep), run_id, name)


def sweep_from_run(run) -> SweepRecord | None:
    """The record of a sweep's run, or None for any other run."""
    tags = run.data.tags
    if tags.get(KIND_TAG) != "sweep":
        return None
    info = run.info
    return SweepRecord(info.run_id, info.experiment_id, info.run_name or "", info.status, tags.get(SPEC_HASH_TAG),
                       tags.get(N_TRIALS_TAG), info.start_time or 0, info.end_time, info.artifact_uri or "",
                       dict(tags))


def sweeps_from_runs(runs: Iterable) -> list[SweepRecord]:
    """The records of the sweep runs among `runs`, in their order."""
    return [r for r in map(sweep_from_run, runs) if r is not None]


def analysis_from_run(run) -> AnalysisRecord:
    info = run.info
    return AnalysisRecord(info.run_id, run.data.tags.get(KIND_TAG, "?"), info.run_name or "", info.status,
                          info.start_time or 0, info.end_time, dict(run.data.metrics), dict(run.data.params),
                          info.artifact_uri or "", dict(run.data.tags))


def history_from_metrics(run_id: str, metric: str, logged: Iterable[Any]) -> MetricHistory:
    """A metric's history from MLflow's `Metric`s: per step the value with the latest timestamp (the
    store's order among equal timestamps)."""
    last: dict[int, float] = {}
    for m in sorted(logged, key=lambda m: m.timestamp):
        last[m.step] = m.value
    return MetricHistory(run_id, metric, tuple(sorted(last.items())))
