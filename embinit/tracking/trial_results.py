"""What a returned trial's result (the trainer's dict: `history`, `test`, `best`, `best_epoch`, the
embedding statistics, ...) becomes in its MLflow run's final batch (embinit.tracking.trial_run `finish`):
the one-value metrics (`test/*`, `best/*`, `selected/val/*`, `init/emb/<KEY_EMB_STATS>`, `best_epoch`,
wall time, coverage), the closing tags, and the `emb_stats.json` table artifact of every embedding
statistic. Pure functions of the result: no MLflow client, so they are tested without a store."""

from __future__ import annotations

import json
import math
from typing import Any

from embinit.tracking.mlflow_store import metrics_at
from embinit.tracking.records import BLEU_SIGNATURE_TAG, EXECUTION_TAG, LABELS_TAG, STATUS_TAG, TRAINER_LABEL_TAG

# Embedding statistics kept as metrics (Table 2's columns, read by the reproduction); the rest of the
# ~70 statistics go to the `emb_stats.json` table artifact instead of one-value bar charts.
KEY_EMB_STATS = ("rows", "min", "max", "mean", "std", "scaled_min", "scaled_max", "scaled_std", "pe_std",
                 "absorption")
EMB_STATS_FILE = "emb_stats.json"
# MLflow's tag naming a run's table artifacts: the UI shows such a JSON file as a table.
LOGGED_ARTIFACTS_TAG = "mlflow.loggedArtifacts"


def final_metrics(result: dict[str, Any]) -> list:
    """The result's one-value metrics (MLflow `Metric`s at step 0): `test/*`, `best/*`, `selected/val/*`,
    the initial table's `init/emb/<KEY_EMB_STATS>`, `best_epoch`, `wall_time_s`, `diverged_step` and
    `coverage/*` (a missing or non-finite value is left out, as `metrics_at` does)."""
    metrics = metrics_at(result.get("test") or {}) + metrics_at(result.get("best") or {}, prefix="best/")
    metrics += metrics_at(selected_metrics(result["history"], result.get("best_epoch")), prefix="selected/")
    metrics += metrics_at(key_emb_stats(result))
    extra = {"best_epoch": result.get("best_epoch"), "wall_time_s": result.get("wall_time_s"),
             "diverged_step": result.get("diverged_step"), "coverage": result.get("coverage") or {}}
    return metrics + metrics_at(extra)


def final_tags(result: dict[str, Any], with_table: bool) -> list:
    """The closing tags (MLflow `RunTag`s): the status, the trainer's label (the label tag stays the
    spec's, which may be a custom `name`), how it executed (separate or fused), the BLEU signature, the
    class labels in id order (when they fit a tag) and, `with_table`, the tag that shows `emb_stats.json`
    as a table in MLflow's UI."""
    from mlflow.entities import RunTag
    from mlflow.utils.validation import MAX_TAG_VAL_LENGTH
    tags = [RunTag(STATUS_TAG, result["status"]), RunTag(TRAINER_LABEL_TAG, result.get("label") or ""),
            RunTag(EXECUTION_TAG, ((result.get("info") or {}).get("execution") or {}).get("mode", "separate"))]
    if result.get("bleu_signature"):
        tags.append(RunTag(BLEU_SIGNATURE_TAG, result["bleu_signature"]))
    labels = ((result.get("info") or {}).get("data") or {}).get("label_names")
    if isinstance(labels, list) and len(json.dumps(labels)) <= MAX_TAG_VAL_LENGTH:
        tags.append(RunTag(LABELS_TAG, json.dumps(labels)))
    if with_table:
        tags.append(RunTag(LOGGED_ARTIFACTS_TAG, json.dumps([{"path": EMB_STATS_FILE, "type": "table"}])))
    return tags


def diverged_note(result: dict[str, Any]) -> str | None:
    """A diverged trial's run description (MLflow's `mlflow.note.content`): MLflow shows its run as a green
    "Finished" like any result, with the `best/*` and `selected/val/*` of its epochs before the NaN, so the
    run's page says what it is and what the report does with it. None for any other result."""
    if result.get("status") != "diverged":
        return None
    epochs = sum(1 for h in result.get("history") or [] if "epoch" in h)
    before = (f"best/* and selected/val/* are from the {epochs} epoch{'s' if epochs != 1 else ''} before it"
              if epochs else "no epoch completed")
    return (f"Diverged: the training loss was NaN/inf at optimizer step {result.get('diverged_step')}. "
            f"No test metrics; the report counts this trial as diverged and leaves it out of its row's mean; "
            f"{before}.")


def key_emb_stats(result: dict[str, Any]) -> dict[str, Any]:
    """The initial target table's KEY_EMB_STATS, prefixed `init/`."""
    init = result.get("emb_stats_init") or {}
    return {f"init/emb/{k}": init[f"emb/{k}"] for k in KEY_EMB_STATS if f"emb/{k}" in init}


def emb_stats_table(result: dict[str, Any]) -> dict[str, list]:
    """Every embedding statistic as columns statistic, init, best (one row per statistic, e.g.
    `emb/std`, `emb_src/absorption`), for `table_json`."""
    init, best = result.get("emb_stats_init") or {}, result.get("emb_stats_best") or {}
    names = sorted(set(init) | set(best))
    return {"statistic": names, "init": [init.get(n) for n in names], "best": [best.get(n) for n in names]}


def table_json(columns: dict[str, list]) -> str:
    """Columns as the JSON of an MLflow table artifact (what `MlflowClient.log_table` writes: pandas'
    "split" layout without the index; a value that is not a finite number, or missing, is null). Written
    as a plain artifact, with the run's `mlflow.loggedArtifacts` tag set in the trial's final batch, it
    costs one request where `log_table` makes five (it lists, reads the run twice and tags it alone)."""
    names = list(columns)

    def cell(v):
        v = v.item() if hasattr(v, "item") else v   # a numpy scalar
        return None if isinstance(v, float) and not math.isfinite(v) else v
    rows = [[cell(v) for v in row] for row in zip(*(columns[n] for n in names))]
    return json.dumps({"columns": names, "data": rows}, allow_nan=False)


def selected_metrics(history: list[dict[str, Any]], best_epoch: int | None) -> dict[str, float]:
    """Every validation metric (`val/*`) of the epoch the criterion selected: the checkpoint whose test
    metrics are reported. `best/*` is each metric's own best, possibly at another epoch (the paper reports
    MNLI's matched and mismatched maxima); this is the one-checkpoint view."""
    row = next((h for h in history if best_epoch is not None and h.get("epoch") == best_epoch), {})
    return {k: v for k, v in row.items() if k.startswith("val/")}
