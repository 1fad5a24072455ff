"""Trial records: MLflow trial runs read back as frozen values, and the one rule for which run stands
for a trial key.

Every reader of trials (the report, the reproduction, the sweep's result, the Optuna resume, the
service) goes through `from_runs` and `by_key` (`stand_ins` where the slot is not the key: a seed of a
report row); `embinit.tracking.run_readers` searches MLflow and `embinit.tracking.trial_run` writes runs
with the tag names below. This module imports neither MLflow nor torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, TypeVar

# Tags of a trial's child run (see embinit.tracking.trial_run for the whole layout).
KEY_TAG, LABEL_TAG, STATUS_TAG = "embinit.trial_key", "embinit.label", "embinit.status"
TASK_TAG, SEED_TAG, CONFIG_TAG, ERROR_TAG = "embinit.task", "embinit.seed", "embinit.config", "embinit.error"
GROUP_TAG = "embinit.group"  # JSON of the ablation-axis and search-point values (report grouping)
# MLflow cuts a tag's value to 8,000 characters, silently (mlflow.utils.validation.MAX_TAG_VAL_LENGTH): a
# config longer than that (a task defined with hundreds of labels) goes on in CONFIG_TAG.1, .2, ...
# (`config_tags`; read back whole by `config_of`).
TAG_VALUE_CHARS = 8000
TRAINER_LABEL_TAG, BLEU_SIGNATURE_TAG = "embinit.trainer_label", "embinit.bleu_signature"
# Tags of a sweep's parent run and of analysis runs.
SPEC_HASH_TAG, KIND_TAG, N_TRIALS_TAG = "embinit.spec_hash", "embinit.kind", "embinit.n_trials"
# The name of the spec a sweep run ran (`run_writers.start_parent_run`): the run's own name adds its number in
# the experiment (`sst2-grid #3`). Sweep runs from before the tag were named after the spec alone.
SPEC_NAME_TAG = "embinit.spec_name"
# A trial names its sweep's run in its own tag, not `mlflow.parentRunId`: MLflow's UI folds child runs
# under a collapsed parent, and a sweep is read by comparing its trials side by side in the run table.
PARENT_TAG = "embinit.sweep_run"
# The statuses (`run_status`) of a trial that ran to its end, MLflow's FINISHED: it has a result (a
# diverged one has no metric) and is never trained again.
RESULT = ("finished", "diverged")
# where the trial's worker ran: its host name, and its Ray node's address when it ran under Ray (a resumed
# trial names the node of its latest attempt)
NODE_TAG, HOST_TAG = "embinit.node", "embinit.hostname"
# every device and thread count the run's attempts trained on, in order (`cpu, 1 thread; cpu, 2 threads`): a run
# resumed elsewhere has numbers a run trained there from scratch need not reproduce (embinit.rerun)
TRAINED_ON_TAG, TRAINED_ON_SEP = "embinit.trained_on", "; "
DEVICE_TAG = "embinit.device"  # where the trial trained, e.g. `cuda:0 (NVIDIA H100 80GB HBM3)` or `cpu`
INIT_TAG = "embinit.init"  # the label again, under a name MLflow's "Group by" menu reads well
# The label, axes' and search point's values and task as text (`run_names.trial_cell`, `GloVe lr=0.001 (mnli)`):
# MLflow's "Group by" on it averages a grid point's or ablation cell's seeds. Runs from before it lack it.
CELL_TAG = "embinit.cell"
EXECUTION_TAG = "embinit.execution"  # separate | fused (the trial's result.json has the group)
# `config.CODE_VERSION` when the run was created (in its key too, but a key cannot be read back): the
# report says when a row pools seeds of several code versions. Runs from before the tag lack it.
CODE_VERSION_TAG = "embinit.code_version"
# The model size the trainer resolved, JSON {"d_model": D, "heads": H}, set when training starts. The config
# tag keeps what was planned, where an unset `d_model` means "the pretrained source's D, else the task's":
# a Xavier trial and a GloVe-300d trial of one spec without `d_model` both read None there, yet trained at
# D=512 (8 heads) and D=300 (10 heads). The report compares rows by what they trained with. Older runs lack it.
MODEL_SIZE_TAG = "embinit.model_size"
# a classifier's labels in the order of its outputs (JSON; with the result): a task defined without `labels`
# takes its train file's, so the record says which id is which
LABELS_TAG = "embinit.labels"
# What a trial's worker ran (embinit.tracking.provenance): MLflow's own commit tag (the UI's "Version"), the
# commit of the code the worker imported (`-dirty` when its checkout differed), and every commit that
# trained the run, comma-separated, in order (a resumed run may have two); the library versions (JSON),
# set when training starts, as is where the data came from (`local:<folder>`, `hub:<dataset>`,
# `generated`: a key cannot tell a local copy from the hub). SHA256_TAG + field: the content digest
# (hex) the key holds of each file input (embinit.file_inputs), e.g. `embinit.sha256.pretrained`.
# HUB_REVISION_TAG + field: `<hub id>@<commit>` of the cached snapshot a side's sub-word rows were read
# from (a key holds a hub id as written, so this is what tells two revisions of one id apart); a hub
# dataset's commit, where the hub cache has it, ends DATA_SOURCE_TAG's `hub:<dataset>@<commit>`.
GIT_COMMIT_TAG, GIT_COMMITS_TAG = "mlflow.source.git.commit", "embinit.git_commits"
VERSIONS_TAG, DATA_SOURCE_TAG, SHA256_TAG = "embinit.versions", "embinit.data_source", "embinit.sha256."
HUB_REVISION_TAG = "embinit.hub_revision."
# The last epoch whose checkpoint the trial's folder keeps (embinit.sweep.resume), written with each
# epoch's metrics and cleared when the folder goes: an unfinished run with it is resumable, and running
# its spec again continues this run after that epoch. RESUMED_TAG: the epoch a rerun resumed after.
CHECKPOINT_TAG, RESUMED_TAG = "embinit.checkpoint_epoch", "embinit.resumed_after_epoch"
# A trial that started over without a checkpoint, in a run of its own: RESTARTED_TAG on the new run names
# the dead attempt's run, closed failed with SUPERSEDED_TAG naming the new one (embinit.tracking.trial_run).
RESTARTED_TAG, SUPERSEDED_TAG = "embinit.restarted_from", "embinit.superseded_by"
# Whether the trial's search point is the one its report row reports (embinit.report.point_tags), set on each
# trial of a search at the end of each sweep into its experiment: `selected` | `not selected`, and in
# SEARCH_NOTE_TAG which point was chosen by what. Runs of searches no sweep ended since lack them.
SEARCH_POINT_TAG, SEARCH_NOTE_TAG = "embinit.search_point", "embinit.search_point_note"
# The tags a sweep sets again on runs it did not train (embinit.report.point_tags), read back to write only changes.
SHOWN_TAGS = (CELL_TAG, SEARCH_POINT_TAG, SEARCH_NOTE_TAG)
# The spec's `analyses.similarity` a trial ran with (embinit.sweep.analyses.run_tags), SIMILARITY_TAG + field:
# `k`, `neighbours` (dot | cosine), `scores` (comma-separated, the plotted one first), `every_n_steps` and
# `reference` (`reference_seed 0`, `reference_emb_seed 1`, `fixed <path or run id>`, `none (snapshots only)`;
# `... (this run is the reference)` on the reference itself). Tags, outside the key and the config (the
# analyses never change a key), set on the runs a sweep trains, never on a finished run it reuses. A run
# a rerun continued under other settings holds the latest attempt's; SIMILARITY_CHANGED_TAG then says what
# changed (`k 10 -> 20`) where points measured before were logged. Runs from before these tags lack them.
SIMILARITY_TAG = "embinit.similarity."
SIMILARITY_CHANGED_TAG = SIMILARITY_TAG + "changed"
# The steps an attempt could not compare with its reference seed, and why (embinit.sweep.analyses
# .not_compared_tags): e.g. `steps 0, 100 (2): the reference's snapshots were written under other settings (...)`.
NOT_COMPARED_TAG = SIMILARITY_TAG + "not_compared"

# Which run stands for a trial key when it has several (retries, re-runs): a result beats a run in
# progress, which beats an attempt that stopped unfinished (failed, or interrupted: its sweep was stopped
# or its driver lost), which beats a cancellation; among equals a resumable run (the one a rerun
# continues) beats one that is not, then the newest run (`rank`). Failed and interrupted rank alike, so
# a key's newest attempt speaks for it: an old failure does not hide a later attempt's interruption.
STATUS_RANK = {"finished": 3, "diverged": 3, "running": 2, "failed": 1, "interrupted": 1, "cancelled": 0}


# How a run is closed when its sweep's driver is gone (killed outright, its Ray, node or API lost) or a
# signal stopped the sweep: the trials did not fail on their own and a rerun resumes them, so they are
# interrupted (counted as stopped, never as failed), by `embinit run` (its supervisor, its rerun's
# `run_writers.close_dead_sweeps`) and by the service's reconciler alike: (MLflow status, STATUS_TAG).
INTERRUPTED = ("KILLED", "interrupted")
# What an interruption's reason ends with (embinit.sweep.interrupt, guardian); a closed run that keeps a
# checkpoint then adds only the epoch it continues after (run_writers.close_run), not the clause again.
RERUN_RESUMES = "running the same spec again resumes: finished trials are reused"


def run_status(run) -> str:
    """finished | diverged | failed | cancelled | interrupted | running, from MLflow's run status and
    embinit's tag (a KILLED run is `interrupted` when a signal stopped its sweep or its driver was lost,
    `INTERRUPTED`; else `cancelled`)."""
    status = run.info.status
    if status == "FINISHED":
        return "diverged" if run.data.tags.get(STATUS_TAG) == "diverged" else "finished"
    if status == "KILLED" and run.data.tags.get(STATUS_TAG) == "interrupted":
        return "interrupted"
    return {"FAILED": "failed", "KILLED": "cancelled"}.get(status, "running")


@dataclass(frozen=True)
class TrialRecord:
    """One trial run as embinit wrote it. `label` and `task` read "?" on a run that lacks their tags."""

    run_id: str
    key: str
    task: str
    label: str
    status: str
    config: dict[str, Any] = field(default_factory=dict)
    group: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    seed: int | None = None
    error: str | None = None
    parent_id: str | None = None
    start_ms: int = 0
    end_ms: int | None = None
    resume_epoch: int | None = None  # an unfinished run whose checkpoint after this epoch is kept
    device: str | None = None        # where it trained (`DEVICE_TAG`), once training started
    code_version: str | None = None  # `CODE_VERSION_TAG`; None on a run written before it was recorded
    model_size: dict[str, Any] = field(default_factory=dict)   # `MODEL_SIZE_TAG`: d_model, heads as trained
    file_digests: dict[str, str] = field(default_factory=dict)  # `SHA256_TAG` + field -> hex: what its key held
    similarity: dict[str, str] = field(default_factory=dict)    # `SIMILARITY_TAG` + field -> value: its settings
    name: str | None = None          # the run's name in MLflow's run table (`run_names.trial_run_name`)
    trained_on: tuple[str, ...] = ()  # `TRAINED_ON_TAG`: each device and thread count its attempts trained on
    config_problem: str | None = None  # why CONFIG_TAG did not read as a config (then `config` is {})
    shown: dict[str, str] = field(default_factory=dict)   # `SHOWN_TAGS` the run holds (MLflow's run table)

    @property
    def resumable(self) -> bool:
        return self.resume_epoch is not None

    @property
    def axes(self) -> dict[str, Any]:
        return self.group.get("axes", {})

    @property
    def point(self) -> dict[str, Any]:
        return self.group.get("point", {})

    @property
    def selection(self) -> list:
        return self.group.get("selection") or []


def config_tags(config: dict[str, Any]) -> dict[str, str]:
    """A trial's config as the tags that hold it: its JSON in CONFIG_TAG, continued in CONFIG_TAG.1, .2, ...
    past MLflow's limit on a tag's value."""
    text = json.dumps(config, sort_keys=True, default=str)
    parts = [text[i:i + TAG_VALUE_CHARS] for i in range(0, len(text), TAG_VALUE_CHARS)]
    return {CONFIG_TAG if i == 0 else f"{CONFIG_TAG}.{i}": part for i, part in enumerate(parts)}


def config_of(tags: dict[str, str]) -> dict[str, Any]:
    """A trial run's config from its tags (`config_tags`); {} without one, or for one that is not JSON (a run
    written before configs were continued, whose long config MLflow cut): `read_config` says why."""
    return read_config(tags)[0]


def read_config(tags: dict[str, str]) -> tuple[dict[str, Any], str | None]:
    """(`config_of`, why the tag is no config or None): `not valid JSON (Expecting ',' delimiter: line 1
    column 26 (char 25); 26 characters)` or `JSON but not an object (a list)`. The readers of a record
    that need its config (`embinit train --from-run`) say so, not that the empty config lacks a `task`."""
    text, i = tags.get(CONFIG_TAG, "{}"), 1
    while f"{CONFIG_TAG}.{i}" in tags:
        text, i = text + tags[f"{CONFIG_TAG}.{i}"], i + 1
    parts = f" in {CONFIG_TAG} and {CONFIG_TAG}.1-.{i - 1}" if i > 1 else ""
    try:
        config = json.loads(text)
    except ValueError as e:
        return {}, f"not valid JSON ({e}; {len(text)} characters{parts})"
    if not isinstance(config, dict):
        return {}, f"JSON but not an object (a {type(config).__name__})"
    return config, None


def from_run(run) -> TrialRecord | None:
    """The record of an MLflow run, or None for a run that is not a trial (a sweep parent, an analysis)."""
    tags = run.data.tags
    if KEY_TAG not in tags:
        return None
    seed, kept = tags.get(SEED_TAG), tags.get(CHECKPOINT_TAG, "")
    status = run_status(run)
    config, config_problem = read_config(tags)
    _register_definition(tags.get(TASK_TAG), config)
    return TrialRecord(run.info.run_id, tags[KEY_TAG], tags.get(TASK_TAG, "?"), tags.get(LABEL_TAG, "?"),
                       status, config,
                       _group(tags.get(GROUP_TAG)), dict(run.data.metrics),
                       int(seed) if seed is not None and seed.lstrip("-").isdigit() else None,
                       tags.get(ERROR_TAG), tags.get(PARENT_TAG), run.info.start_time or 0, run.info.end_time,
                       int(kept) if kept.isdigit() and status not in RESULT else None,
                       tags.get(DEVICE_TAG), tags.get(CODE_VERSION_TAG), _model_size(tags.get(MODEL_SIZE_TAG)),
                       {k.removeprefix(SHA256_TAG): v for k, v in tags.items() if k.startswith(SHA256_TAG)},
                       {k.removeprefix(SIMILARITY_TAG): v for k, v in tags.items() if k.startswith(SIMILARITY_TAG)},
                       getattr(run.info, "run_name", None) or None,
                       tuple(e for e in tags.get(TRAINED_ON_TAG, "").split(TRAINED_ON_SEP) if e), config_problem,
                       {k: tags[k] for k in SHOWN_TAGS if k in tags})


def _group(text: str | None) -> dict[str, Any]:
    """`GROUP_TAG`'s axes and search point ({} without the tag, or with one that is not a JSON object: one
    run's cut or edited tag raised a bare JSONDecodeError in every reader of its experiment)."""
    try:
        group = json.loads(text) if text else {}
    except ValueError:
        return {}
    return group if isinstance(group, dict) else {}


def _model_size(text: str | None) -> dict[str, Any]:
    """`MODEL_SIZE_TAG`'s d_model and heads ({} without the tag, or with one that does not parse)."""
    try:
        size = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {k: v for k, v in size.items() if k in ("d_model", "heads")} if isinstance(size, dict) else {}


def _register_definition(task: str | None, config: dict[str, Any]) -> None:
    """A trial of a task defined in its spec: the definition its config holds is registered, so the
    analyses read the task in a process that never saw the spec (where two sweeps defined the name
    differently, the last record read is registered; the report and the trial rows read each trial's own
    definition, `task_defs.entry_of`).
    One this code refuses is left unregistered: its rows are shown without the task's metric rules."""
    definition = config.get("task_def") if isinstance(config, dict) else None
    if task and isinstance(definition, dict):
        from embinit import task_defs
        from embinit.errors import EmbinitError
        try:
            task_defs.ensure(task, definition)
        except EmbinitError:
            pass


def from_runs(runs: Iterable) -> list[TrialRecord]:
    """The records of the trial runs among `runs`, in their order."""
    return [r for r in map(from_run, runs) if r is not None]


def rank(rec: TrialRecord) -> tuple[int, bool]:
    """How strongly a run stands for its slot: `STATUS_RANK`, then resumable over not."""
    return STATUS_RANK[rec.status], rec.resumable


R = TypeVar("R")


def stand_ins(records: Iterable[R], slot: Callable[[R], Hashable] = lambda r: r.key, *,
              start: Callable[[R], int] = lambda r: r.start_ms,
              strength: Callable[[R], Any] = rank) -> dict[Hashable, R]:
    """slot -> the record that stands for it, the one rule every reader uses (`slot(record)` names the
    slot: the trial key by default; the report's (search point, seed), completeness's planned trial, the
    reproduction's seed). The highest `rank` wins; among equal ranks the newest (the latest `start_ms`),
    and among equal starts the later in `records`. Slots in the order of their oldest record. `start` and
    `strength` say where a record that is no trial record keeps its start and its rank: Table 4's analogy
    runs (`embinit.reproduction.table4_runs`, all finished: the newest run of each seed) pass theirs."""
    chosen: dict[Hashable, R] = {}
    for rec in sorted(records, key=start):   # stable: equal starts keep their order
        name = slot(rec)
        old = chosen.get(name)
        if old is None or strength(rec) >= strength(old):
            chosen[name] = rec
    return chosen


def by_key(records: Iterable[TrialRecord], keys: set[str] | None = None) -> dict[str, TrialRecord]:
    """trial key -> the record that stands for it (`stand_ins`), for the keys in `keys` (all when None);
    keys in the order of their oldest record."""
    return stand_ins(r for r in records if keys is None or r.key in keys)


def trained_elsewhere(chosen: dict[str, TrialRecord], sweeps: set[str]) -> set[str]:
    """Keys whose result (the record `by_key` chose, finished or diverged) was trained by a sweep not
    in `sweeps` (its `embinit.sweep_run` names another): an earlier run, or another experiment sharing
    the key. Those count as `reused`, not `finished`, so the counts say who did the work. A run a rerun
    reopened and finished belongs to the rerun's sweep."""
    return {k for k, rec in chosen.items() if STATUS_RANK[rec.status] == 3 and rec.parent_id not in sweeps}
