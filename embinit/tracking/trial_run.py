"""The MLflow run of one trial, written from inside the trial's Ray worker (so no driver-side logger can
lose the tracking URI or stage artifacts on the wrong machine): `TrialRun`.

Layout: one MLflow experiment per spec name; one parent run per sweep submission (`embinit.tracking.run_writers`);
one child run per trial. A child run carries:
- tags `embinit.trial_key`, `embinit.label` (paper label), `embinit.task`, `embinit.seed`,
  `embinit.status` (running | finished | diverged | failed), `embinit.config` (the config as JSON),
  `embinit.error` for failures, `embinit.sweep_run` (the sweep's run id: the latest sweep that trained
  it); `embinit.checkpoint_epoch` while its checkpoint folder is kept (embinit.sweep.resume: a run that
  did not finish resumes from it when its spec runs again; deleted once nothing is kept) and
  `embinit.resumed_after_epoch` on a run a rerun continued; `embinit.restarted_from` on the run of an attempt
  that started over without a checkpoint, naming the dead attempt's run (closed failed, with
  `embinit.superseded_by`); `embinit.code_version` (the
  `config.CODE_VERSION` its key was made with); `embinit.trainer_label` (with the result: the label of
  the init the trainer built on the target or only side) and, for a classifier, `embinit.labels` (JSON: the
  labels in the order of its outputs, a defined task's derived from its train file where not given);
- tags `embinit.init` (= the label), `embinit.cell` (label, axes' and search point's values, task as text,
  `run_names.trial_cell`) and `embinit.group` (JSON: axes, search point, selection metric) for MLflow's
  run table: "Group by" the tag `embinit.cell` averages the seeds of each grid point and ablation cell
  (`embinit.init` pools every point and cell of an init);
- for a language-model trial validated on another split than its own (`extras: {eval_split: test}`), the
  run's description (MLflow's `mlflow.note.content`) says so: `val/* is the test split (eval_split: test);
  no separate test split` (`tasks.raw.eval_split_note`; its metrics keep their names);
- what the worker ran and read, set when the run is created or reopened: `mlflow.source.git.commit`
  (MLflow's own tag, the UI's "Version": the commit of the code this worker process imported,
  `embinit.tracking.provenance.process_commit`; none outside a git checkout) and `embinit.git_commits` (every
  commit that trained the run, comma-separated, appended on reopening: a run resumed by other code
  names both); `embinit.sha256.<field>` (the hex digest its key holds of each file input, e.g.
  `pretrained`, `data_dir`: embinit.file_inputs, hashed once per file version);
- set when training starts, in its batch: `embinit.device` (e.g. `cpu`, `cuda:0 (NVIDIA H100 ...)`),
  `embinit.trained_on` (each attempt's device and torch thread count where they changed, appended on
  reopening: `cpu, 1 thread; cpu, 2 threads` for a run resumed with more threads),
  `embinit.versions` (JSON of python, torch, numpy, sacrebleu, spacy, mlflow, embinit) and
  `embinit.data_source` (`local:<folder>`, `hub:<dataset>[@<commit>]` or `generated`: without a
  data_dir the key is the same whichever the worker found; a `data_revision` that is no commit is said
  beside the commit read, `hub:<dataset>@<commit> (pinned: v1)`) and `embinit.hub_revision.<field>`
  (`<hub id>@<commit>` of the cached snapshot a side's sub-word rows, or a hub tokenizer, came from: the
  key holds the id as written, whatever revision the hub served; a pinned id's revision is said
  beside), and `embinit.model_size` (JSON `d_model`, `heads` as the trainer resolved them, which the
  report compares rows by); with the spec's `analyses.similarity`, its settings: `embinit.similarity.k`,
  `.neighbours`, `.scores`, `.every_n_steps` and `.reference` (`records.SIMILARITY_TAG`, `note_similarity`),
  and, where the latest attempt could not compare some steps with its reference, `.not_compared` (which
  steps, and why: `embinit.sweep.analyses.not_compared_tags`, with the final batch);
- its name `<label>-s<seed>`, then its axes' and search point's values (`Xavier-s0 lr=0.001`,
  `run_names.trial_run_name`), then, in a spec of several tasks, the task (`Xavier-s0 lr=0.001 (mnli)`);
  params: the flat config the model trains with (`TrainContext.cfg`: task defaults filled in, d_model and
  heads resolved against a pretrained source's D, precision as resolved; unset options and those the trial
  never reads left out: `run_names.idle_options`), `init` = the label and `init_spec` = the init as written
  (embinit.tracking.run_names), and `model_parameters`/`trainable_parameters`, all logged when training
  starts (with the model size: one write fewer per trial). A trial that never started logs its planned params
  with its failure (or its result: the no-work trainer), without what its plan leaves to the trainer
  (`run_names.planned_params`); a reopened run keeps the params it has (they cannot change). The config itself
  is the `embinit.config` tag from the run's creation;
- metrics: per epoch (step = epoch) `train/loss`, `val/loss`, `val/<metric>`, `tokens_per_s`, ...; at the
  end `test/*`, `best/<val metric>` (each one's own best over the epochs), `selected/val/*` (every
  validation metric at `best_epoch`, the checkpoint the criterion selected and `test/*` measured: MNLI's
  mismatched accuracy at the matched-best epoch, a translation's val BLEU at its best-loss epoch),
  `best_epoch` and the key statistics of the initial target table (`init/emb/<KEY_EMB_STATS>`: Table 2's
  columns); every embedding statistic, at init and at the best
  epoch, both tables, goes to the table artifact `emb_stats.json` (one row per statistic: these final
  metrics, tags and table from the result, embinit.tracking.trial_results); with the
  spec's `analyses`, `sim/*` and `probe/*` at optimizer steps, `init/probe/*` and `best/probe/*`.

Writes per trial, against a tracking server: the run's creation, one batch when training starts, one per
epoch, the final batch, its artifacts (written straight to the run's artifact location) and its close.
A sweep given the database behind a tracking server (`SweepContext.store_uri`) writes the run's records
to that database and only its artifacts through the server (`artifacts_via`).
"""

from __future__ import annotations

import json
import socket
from typing import Any, Iterable

from embinit.tracking import provenance, trial_results
from embinit.file_inputs import PREFIX, content_ids
from embinit.tasks.raw import eval_split_note
from embinit.tracking.mlflow_store import client, log_batch, metrics_at, retry
from embinit.tracking.records import (CELL_TAG, CHECKPOINT_TAG, CODE_VERSION_TAG, DATA_SOURCE_TAG, DEVICE_TAG,
                                      ERROR_TAG, GIT_COMMIT_TAG, GIT_COMMITS_TAG, GROUP_TAG, HOST_TAG,
                                      HUB_REVISION_TAG, INIT_TAG, KEY_TAG, NODE_TAG, LABEL_TAG, MODEL_SIZE_TAG,
                                      PARENT_TAG, RESTARTED_TAG, RESULT, RESUMED_TAG, SEED_TAG, SHA256_TAG,
                                      SIMILARITY_CHANGED_TAG, SIMILARITY_TAG, STATUS_TAG, SUPERSEDED_TAG,
                                      TAG_VALUE_CHARS, TASK_TAG, TRAINED_ON_SEP, TRAINED_ON_TAG,
                                      VERSIONS_TAG, config_tags)
from embinit.tracking.run_names import (NOTE_TAG, planned_params, resolved_params, trial_cell, trial_params,
                                        trial_run_name)
from embinit.tracking.run_readers import key_records, metric_history

class TrialRun:
    """The MLflow child run of one trial, written from inside the trial's worker."""

    def __init__(self, uri: str, run_id: str, reopened: bool = False, checkpoint_tagged: bool | None = None,
                 artifact_uri: str | None = None, params: list | None = None, artifacts_via: str | None = None,
                 label: str | None = None, logged_params: Iterable[str] = (), held: dict[str, int] | None = None,
                 held_tags: dict[str, str] | None = None):
        self.uri, self.run_id, self.client = uri, run_id, client(uri)
        # The tracking URI that resolves the run's artifact location: the server when `uri` is the
        # database behind it (an `mlflow-artifacts:` location is served by the server only).
        self.artifacts_via = artifacts_via or uri
        self.reopened = reopened         # an earlier attempt may have logged epochs this one did not
        self.logged: set[int] = set()    # epochs this process logged
        # A reopened run's latest step per metric: what an earlier attempt logged up to (`_batch`).
        self.held: dict[str, int] = dict(held or {})
        self.checkpoint_tagged = checkpoint_tagged   # whether the run has the checkpoint tag (None: ask)
        self.artifact_uri = artifact_uri  # known from creating or reopening the run: no lookup per artifact
        self.params = list(params or ())  # the planned params, not yet logged: they go with the next batch
        self.label = label                # the spec's label: the `init` param
        self.logged_params = set(logged_params)   # names of the params the run has (they cannot change)
        # a reopened run's similarity settings (`note_similarity`) and where it trained (`log_train_start`)
        self.held_tags = dict(held_tags or {})
        self.tags: list = []                      # tags not yet written: they go with the next batch

    @classmethod
    def open(cls, uri: str, exp_id: str, parent_id: str | None, config: dict[str, Any], key: str,
             label: str, group: dict[str, Any], run_id: str | None = None,
             resumed_epoch: int | None = None, key_runs: list | None = None,
             artifacts_via: str | None = None, name_task: str | None = None) -> "TrialRun":
        """Reuse `run_id` (a restarted attempt, or an earlier sweep's run whose checkpoint this one resumes
        after `resumed_epoch`) or this sweep's unfinished run of the key; else create one (naming, and closing
        as superseded, the dead attempt it starts over from, of this sweep or, one that said it kept a
        checkpoint, of an earlier one: `_stranded`). `key_runs`: the
        key's records as `run_readers.key_records` read them (read here when not given). `artifacts_via`:
        the tracking server whose database `uri` is (artifacts go through it). `name_task`: the task a new
        run's name says (a spec of several tasks; `run_names.trial_run_name`)."""
        c = client(uri)
        from mlflow.entities import Param
        params = [Param(k, v[:6000]) for k, v in planned_params(config, label).items()]
        # the digests the key holds (memoized: the key's own hashing, or this, reads each file once)
        inputs = {SHA256_TAG + name: cid.removeprefix(PREFIX) for name, cid in content_ids(config).items()}
        recs = None
        if run_id is None and parent_id is not None:
            recs = key_records(exp_id, uri, key) if key_runs is None else key_runs
            mine = [r for r in recs if r.parent_id == parent_id and r.status not in RESULT]
            run_id = max(mine, key=lambda r: r.start_ms).run_id if mine else None
        superseded = None
        if run_id is not None and resumed_epoch is None and _holds_points(c, run_id):
            superseded, run_id = run_id, None   # this attempt starts over: its points are not that run's
        elif run_id is None and resumed_epoch is None and recs:
            superseded = _stranded(recs)   # an earlier sweep's attempt whose checkpoint this one did not find
        if run_id is not None:
            run = cls._reopen(c, run_id, parent_id, resumed_epoch, inputs)
            return cls(uri, run_id, reopened=True, checkpoint_tagged=CHECKPOINT_TAG in run.data.tags,
                       artifact_uri=run.info.artifact_uri, params=[] if run.data.params else params,
                       artifacts_via=artifacts_via, label=label, logged_params=run.data.params,
                       held={m.key: m.step for m in run.data.to_proto().metrics},
                       held_tags={k: v for k, v in run.data.tags.items()
                                  if k.startswith(SIMILARITY_TAG) or k == TRAINED_ON_TAG})
        from embinit.config import CODE_VERSION
        axes, point = group.get("axes"), group.get("point")
        tags = {KEY_TAG: key, LABEL_TAG: label, INIT_TAG: label, TASK_TAG: config["task"],
                CELL_TAG: trial_cell(config["task"], label, axes, point),
                SEED_TAG: str(config["seed"]),
                STATUS_TAG: "running", **config_tags(config),
                GROUP_TAG: json.dumps(group, sort_keys=True, default=str), CODE_VERSION_TAG: CODE_VERSION,
                **inputs, **commit_tags({}), **host_tags()}
        if parent_id:
            tags[PARENT_TAG] = parent_id
        if superseded:
            tags[RESTARTED_TAG] = superseded
        if note := eval_split_note(config.get("extras")):
            tags[NOTE_TAG] = note   # the run's description in MLflow's UI: which split `val/*` is
        name = trial_run_name(label, config["seed"], axes, point, name_task)
        run = retry(lambda: c.create_run(exp_id, run_name=name, tags=tags))
        if superseded:
            _close_superseded(c, superseded, run.info.run_id)
        return cls(uri, run.info.run_id, checkpoint_tagged=False, artifact_uri=run.info.artifact_uri,
                   params=params, artifacts_via=artifacts_via, label=label)

    @staticmethod
    def _reopen(c, run_id: str, parent_id: str | None, resumed_epoch: int | None, inputs: dict[str, str]):
        """Running again, in the sweep `parent_id`, by this worker's code (its commit appended to the
        run's list) on the inputs it reads now, without the error an earlier close left on it; returns
        the run as it was before these tags."""
        from mlflow.entities import RunTag
        retry(lambda: c.update_run(run_id, status="RUNNING"))
        run = retry(lambda: c.get_run(run_id))
        tags = {STATUS_TAG: "running", **inputs, **commit_tags(run.data.tags), **host_tags()}
        if parent_id:
            tags[PARENT_TAG] = parent_id
        if resumed_epoch is not None:
            tags[RESUMED_TAG] = str(resumed_epoch)
        retry(lambda: c.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()]))
        if ERROR_TAG in run.data.tags:
            retry(lambda: c.delete_tag(run_id, ERROR_TAG))
            run.data.tags.pop(ERROR_TAG, None)
        return run

    def _batch(self, metrics=(), params=(), tags=()) -> None:
        """One write of metrics, params and tags; the planned params and the tags not yet logged go with it."""
        log_batch(self.client, self.run_id, metrics, [*self.params, *params], [*self.tags, *tags])
        self.logged_params |= {p.key for p in [*self.params, *params]}
        self.params, self.tags = [], []

    def note_similarity(self, tags: dict[str, str]) -> None:
        """The similarity analysis's settings this attempt measures with (`records.SIMILARITY_TAG` + field,
        from `embinit.sweep.analyses.run_tags`), written with the run's next batch. Tags, not params: MLflow
        refuses to change a param's value, and a rerun may continue this run under a spec whose analyses
        differ (they are not in the key). The run then holds this attempt's values; where it already held
        `sim/*` points measured with others, `SIMILARITY_CHANGED_TAG` says what changed (`k 10 -> 20`,
        appended to what an earlier change wrote)."""
        held = self.held_tags
        changed = [f"{k.removeprefix(SIMILARITY_TAG)} {held[k]} -> {v}" for k, v in tags.items()
                   if k in held and held[k] != v]
        if changed and any(name.startswith("sim/") for name in self.held):
            earlier = held.get(SIMILARITY_CHANGED_TAG)
            tags = {**tags, SIMILARITY_CHANGED_TAG: "; ".join(filter(None, [earlier, ", ".join(changed)]))}
        self.note_tags(tags)

    def note_tags(self, tags: dict[str, str]) -> None:
        """Tags written with the run's next batch (e.g. its final one: `finish`); a value past MLflow's
        length keeps its end (the latest of an appended list)."""
        from mlflow.entities import RunTag
        self.tags += [RunTag(k, v[-TAG_VALUE_CHARS:]) for k, v in tags.items()]

    def _log_text(self, text: str, name: str) -> None:
        import tempfile
        from pathlib import Path
        with tempfile.TemporaryDirectory(prefix="embinit-artifact-") as tmp:
            path = Path(tmp) / name
            path.write_text(text)
            self._log_artifact(str(path), None)

    def _log_artifact(self, path: str, artifact_dir: str | None) -> None:
        """Straight to the run's artifact location (MLflow's `log_text`/`log_artifact` look the run up
        first, every time: one more request to a tracking server per artifact); the location is asked
        once when neither creating nor reopening the run gave it."""
        if self.artifact_uri is None:
            self.artifact_uri = retry(lambda: self.client.get_run(self.run_id)).info.artifact_uri
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
        repo = get_artifact_repository(self.artifact_uri, tracking_uri=self.artifacts_via)
        retry(lambda: repo.log_artifact(path, artifact_dir))

    def log_epoch(self, epoch: int, metrics: dict[str, Any], checkpoint: bool = False) -> None:
        """One epoch's metrics (step = epoch); `checkpoint`: the trial's kept folder now holds it."""
        from mlflow.entities import RunTag
        tags = [RunTag(CHECKPOINT_TAG, str(epoch))] if checkpoint else ()
        self._batch(self._unheld(metrics_at({k: v for k, v in metrics.items() if k != "epoch"}, step=epoch)),
                    tags=tags)
        self.logged.add(epoch)
        self.checkpoint_tagged = self.checkpoint_tagged or checkpoint

    def log_train_start(self, cfg, model, device: str) -> None:
        """One batch when training starts. Params: the config the model trains with (`cfg`, the resolved
        TrialConfig: d_model and heads as resolved against a pretrained source's D, precision as
        resolved for the device), in place of the planned ones, and the model's size (`model_parameters`,
        `trainable_parameters`); a reopened run keeps those it has. Tags: the device (and, appended, where each attempt
        trained: `trained_on`), the library
        versions, where the data came from, and the hub snapshot of each side read from a hub id."""
        from mlflow.entities import Param, RunTag

        from embinit.hf_cache import snapshot_text
        from embinit.init.source_files import hub_ids
        from embinit.tasks.load import data_origin
        values = trial_params(resolved_params(cfg.to_dict()), self.label or str(cfg.init))
        values["model_parameters"] = str(sum(p.numel() for p in model.parameters()))
        values["trainable_parameters"] = str(sum(p.numel() for p in model.parameters() if p.requires_grad))
        params = [Param(k, v[:6000]) for k, v in values.items() if k not in self.logged_params]
        tags = {DEVICE_TAG: device, TRAINED_ON_TAG: trained_on(self.held_tags.get(TRAINED_ON_TAG), device),
                VERSIONS_TAG: provenance.library_versions(),
                DATA_SOURCE_TAG: data_origin(cfg.task, cfg.data_dir, cfg.data_revision),
                MODEL_SIZE_TAG: json.dumps({"d_model": cfg.d_model, "heads": cfg.heads})}
        for field, hub_id in hub_ids(cfg.init, cfg.pretrained, cfg.src_init, cfg.src_pretrained,
                                     cfg.tokenizer).items():
            tags[HUB_REVISION_TAG + field] = snapshot_text(hub_id)
        self.params = []   # planned: `cfg` has what they had, resolved
        self._batch(params=params, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        """Metrics an analysis callback measured (`sim/*`, `probe/*`); step = optimizer step, not epoch."""
        self._batch(self._unheld(metrics_at(metrics, step=step)))

    def _unheld(self, metrics: list) -> list:
        """The points a reopened run does not hold yet. A resumed attempt re-runs the steps after its
        checkpoint, which the dead attempt may have logged (the probe at the resumed step, similarity
        scores within the epoch it died in, an epoch whose Tune checkpoint was older than its log), and
        MLflow would chart both points. An attempt logs its steps in order from its checkpoint on, and a
        later attempt starts from a checkpoint at least as late, so every step up to a metric's latest,
        as the run held it when reopened, is already there."""
        return [m for m in metrics if m.step > self.held.get(m.key, -1)]

    def logged_steps(self, name: str) -> set[int]:
        return metric_history(self.uri, self.run_id, name).steps

    def finish(self, result: dict[str, Any], artifacts: list[tuple[str, str]]) -> None:
        """Final metrics and tags of a returned trial (finished or diverged), then its artifacts."""
        # A resumed attempt's history holds epochs an earlier (dead) attempt may not have logged: those
        # without the task's validation loss (MNLI's is val/loss_matched; it logs no val/loss)
        from embinit.task_registry import loss_metric
        task = (result.get("config") or {}).get("task")
        logged = self.logged_steps(loss_metric(task)) | self.logged if self.reopened else self.logged
        missing = [h for h in result["history"] if h.get("epoch") not in logged]
        metrics = [m for h in missing for m in metrics_at({k: v for k, v in h.items() if k != "epoch"},
                                                          step=h["epoch"])]
        table = trial_results.emb_stats_table(result)
        tags = trial_results.final_tags(result, bool(table["statistic"]))
        if note := trial_results.diverged_note(result):   # the description says it (with the split's note)
            from mlflow.entities import RunTag
            split = eval_split_note((result.get("config") or {}).get("extras"))
            tags.append(RunTag(NOTE_TAG, note + (f"\n\n{split}" if split else "")))
        self._batch(metrics=metrics + trial_results.final_metrics(result), tags=tags)
        self._drop_checkpoint_tag()  # a result: nothing to resume
        self._log_text(json.dumps(result, indent=1, default=str), "result.json")
        if table["statistic"]:
            self._log_text(trial_results.table_json(table), trial_results.EMB_STATS_FILE)
        for artifact_dir, path in artifacts:
            self._log_artifact(path, artifact_dir)
        retry(lambda: self.client.set_terminated(self.run_id, status="FINISHED"))

    def fail(self, error: str, status: str = "FAILED", tag: str | None = None, checkpoint: bool = True) -> None:
        """Record a failed (or cancelled: status KILLED) attempt with its error text; `tag` overrides
        the status tag (`interrupted`); `checkpoint=False`: its kept checkpoint is gone (not resumable)."""
        from mlflow.entities import RunTag
        tag = tag or ("failed" if status == "FAILED" else "cancelled")
        self._batch(tags=[RunTag(STATUS_TAG, tag), RunTag(ERROR_TAG, error[-4000:])])
        if not checkpoint:
            self._drop_checkpoint_tag()
        self._log_text(error, "error.txt")
        retry(lambda: self.client.set_terminated(self.run_id, status=status))

    def _drop_checkpoint_tag(self) -> None:
        """No checkpoint is kept: remove the tag rather than leave it empty (clutter in the run's tags).
        Asks MLflow only when this process does not know whether the run has it."""
        if self.checkpoint_tagged is None:
            self.checkpoint_tagged = CHECKPOINT_TAG in retry(lambda: self.client.get_run(self.run_id)).data.tags
        if self.checkpoint_tagged:
            retry(lambda: self.client.delete_tag(self.run_id, CHECKPOINT_TAG))
            self.checkpoint_tagged = False


def _holds_points(c, run_id: str) -> bool:
    """Whether an earlier attempt logged metrics to the run."""
    return bool(retry(lambda: c.get_run(run_id)).data.metrics)


def _stranded(recs: list) -> str | None:
    """The newest of a key's runs (`recs`) that an earlier sweep left unfinished saying it keeps a
    checkpoint, when this attempt starts over without one (the folder is gone: a cleared cache, another
    `cache_dir`, another node without the object store): left alone, it said forever that running the
    spec again continues it after its epoch, while the trial trained again in another run."""
    dead = [r for r in recs if r.status in ("interrupted", "failed") and r.resumable]
    return max(dead, key=lambda r: r.start_ms).run_id if dead else None


def _close_superseded(c, run_id: str, successor: str) -> None:
    """An unfinished run whose trial starts over from its first step without a checkpoint: the new attempt
    gets a run of its own (`RESTARTED_TAG` names this one), since MLflow keeps every point and the two
    attempts' histories would otherwise be spliced into one run (the new attempt's points at steps the dead
    one had logged were dropped, its later ones kept). This run is closed as failed, saying where its trial went."""
    from mlflow.entities import RunTag
    error = (f"this attempt was cut off and the next one found no checkpoint of it (its folder gone, or under "
             f"another cache_dir or node): the trial started over from its first step in run {successor}")
    retry(lambda: c.log_batch(run_id, tags=[RunTag(STATUS_TAG, "failed"), RunTag(ERROR_TAG, error),
                                            RunTag(SUPERSEDED_TAG, successor)]))
    if CHECKPOINT_TAG in retry(lambda: c.get_run(run_id)).data.tags:   # its folder is gone: not resumable
        retry(lambda: c.delete_tag(run_id, CHECKPOINT_TAG))
    retry(lambda: c.set_terminated(run_id, status="FAILED"))


def trained_on(previous: str | None, device: str) -> str:
    """The run's `TRAINED_ON_TAG` (`previous`, as a reopened run holds it) with this attempt's device and
    torch thread count appended where they differ from the last attempt's."""
    import torch
    n = torch.get_num_threads()
    entry = f"{device}, {n} thread{'s' if n != 1 else ''}"
    seen = [e for e in (previous or "").split(TRAINED_ON_SEP) if e]
    return TRAINED_ON_SEP.join(seen if seen and seen[-1] == entry else [*seen, entry])


def commit_tags(tags: dict[str, str]) -> dict[str, str]:
    """The commit of the code this worker runs (MLflow's `mlflow.source.git.commit`) and the run's list
    of commits with it appended, given the run's `tags`; neither outside a git checkout (the list then
    gains `unknown` when it has entries)."""
    commit = provenance.process_commit()
    commits = provenance.commits_trained(tags.get(GIT_COMMITS_TAG), commit)
    return {**({GIT_COMMIT_TAG: commit} if commit else {}), **({GIT_COMMITS_TAG: commits} if commits else {})}


def host_tags() -> dict[str, str]:
    """Where this attempt runs: the host, and the Ray node when under Ray (the cluster's view of it)."""
    node = provenance.ray_node()
    return {HOST_TAG: socket.gethostname(), **({NODE_TAG: node} if node else {})}
