"""Re-running one trial from its MLflow record (`embinit train --from-run RUN_ID`): the recorded config
with the caller's overrides, the record's file inputs this machine lacks, whether the re-run computes the
recorded trial key (and if not, which key fields differ), and the re-run's `test/*` and `best/*` metrics
beside the record's.

The record is read by `embinit.tracking.run_readers.trial_record` (its config is the run's `embinit.config` tag);
the training is `embinit.train.run_trial`, as for any trial. Nothing here writes to MLflow: a re-run
checks a record, it does not add a run. This module imports neither MLflow nor torch.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, NamedTuple

from embinit.config import CODE_VERSION, TrialConfig, key_of
from embinit.errors import EmbinitError
from embinit.file_inputs import PREFIX, local_path, written_as_path
from embinit.tracking.mlflow_store import flat_numbers
from embinit.path_keys import FILE_FIELDS, PATH_KEYS_DECLARED
from embinit.tracking.records import CONFIG_TAG, TrialRecord

CLOSE = 1e-4   # another CPU, GPU or torch build: the same computation to a few parts in 10^5
COMPARED = ("test/", "best/")   # the metrics a re-run is compared on: the checkpoint's test, the best epochs


def recorded_config(rec: TrialRecord) -> TrialConfig:
    """The trial config of a record, as `TrialConfig.from_dict` reads it."""
    if rec.config_problem is not None:   # its config read as {}: not "missing 1 required argument: 'task'"
        raise EmbinitError(f"the {CONFIG_TAG} tag of MLflow run {rec.run_id} is {rec.config_problem}, so the trial "
                           f"it records cannot be read back (a tag cut at MLflow's length limit by a run written "
                           f"before long configs went on in {CONFIG_TAG}.1, .2, ..., or edited by hand); train "
                           f"the trial from its spec or flags instead (embinit train --task ...)")
    try:
        return TrialConfig.from_dict(rec.config)
    except (EmbinitError, TypeError) as e:   # a field this code lacks, or a required one missing
        raise EmbinitError(f"the {CONFIG_TAG} tag of MLflow run {rec.run_id} is not a trial config this code "
                           f"reads: {e}") from None


def with_overrides(recorded: TrialConfig, given: dict[str, Any]) -> TrialConfig:
    """`recorded` with the fields in `given` replaced; `extras` merged key by key (a flag sets one switch,
    the record's others stay)."""
    extras = {**recorded.extras, **given.get("extras", {})}
    return dataclasses.replace(recorded, **{**given, "extras": extras})


def missing_inputs(recorded: TrialConfig, overridden: set[str]) -> list[tuple[str, str]]:
    """(field, path) of each file input of the record that is not in `overridden` and names a local
    file or folder this machine does not have. A data folder or checkpoint is always a path; a pretrained
    source or tokenizer only when written as one (else a hub id or a tokenizer name, as
    `embinit.file_inputs` reads them)."""
    out = []
    for name in FILE_FIELDS:
        value = getattr(recorded, name)
        if name in overridden or not isinstance(value, str):
            continue
        always_path = PATH_KEYS_DECLARED[name].not_a_file is None
        if (always_path or written_as_path(value)) and not Path(value).expanduser().exists():
            out.append((name, value))
    return out


def _shown(value: Any) -> str:
    return repr(value) if not isinstance(value, str) or not value.startswith("sha256:") else value[:19] + "…"


def recorded_key_fields(rec: TrialRecord, recorded: TrialConfig) -> dict[str, Any]:
    """What the record's key held: `recorded.key_fields()` with each file input counted by the digest its
    run tagged (`embinit.sha256.<field>`), the recording machine's file, whether this machine has that
    path (it would count by its own copy's content) or not (it would count by the path)."""
    fields = recorded.key_fields()
    fields.update({name: PREFIX + digest for name, digest in rec.file_digests.items() if name in fields})
    return fields


def key_differences(recorded: dict[str, Any], rerun: TrialConfig) -> list[str]:
    """Each key field whose value differs between the record's key fields (`recorded_key_fields`) and
    the re-run's (`TrialConfig.key_fields`: resolved, file inputs by content), as `name (recorded X,
    re-run Y)`."""
    a, b = recorded, rerun.key_fields()
    return [f"{name} (recorded {_shown(a.get(name))}, re-run {_shown(b.get(name))})"
            for name in sorted(set(a) | set(b)) if a.get(name) != b.get(name)]


def key_report(rec: TrialRecord, recorded: TrialConfig, rerun: TrialConfig) -> str:
    """Whether the re-run's trial key is the recorded `embinit.trial_key`; if not, what differs."""
    key = rerun.key()
    if key == rec.key:
        return (f"same key as the record: {key} (the same computation: config, file inputs by content, code "
                f"version {CODE_VERSION})")
    parts = [f"different key from the record: re-run {key}, recorded {rec.key}"]
    fields = recorded_key_fields(rec, recorded)
    differences = key_differences(fields, rerun)
    if differences:
        parts.append("fields that differ from the record: " + ", ".join(differences))
    here = key_of(fields)
    if here != rec.key:
        parts.append(f"the record's own config keys to {here} here, not to its recorded key: "
                     + _why_not_recorded_key(rec, recorded))
    return "; ".join(parts)


def _why_not_recorded_key(rec: TrialRecord, recorded: TrialConfig) -> str:
    if rec.code_version and rec.code_version != CODE_VERSION:
        return f"it was recorded by code version {rec.code_version}, this is {CODE_VERSION}"
    files = [f"{n}={getattr(recorded, n)!r}" + ("" if local_path(getattr(recorded, n)) else " (not here)")
             for n in FILE_FIELDS if written_as_path(getattr(recorded, n))]
    if files:
        return ("the content of a file input differs from the recording machine's, or the code's key "
                "rules changed (file inputs: " + ", ".join(files) + ")")
    return "the code's key rules changed since it was recorded"


class MetricRow(NamedTuple):
    name: str
    recorded: float | None
    rerun: float | None

    @property
    def difference(self) -> float | None:
        return None if self.recorded is None or self.rerun is None else self.rerun - self.recorded

    @property
    def equal(self) -> bool:
        both_nan = self.recorded is not None and self.rerun is not None and math.isnan(self.recorded) \
            and math.isnan(self.rerun)
        return both_nan or (self.recorded is not None and self.recorded == self.rerun)


def compared_metrics(rec: TrialRecord, result: dict[str, Any]) -> list[MetricRow]:
    """The record's `test/*` and `best/*` metrics beside the re-run's, named as the trial's run logs
    them (`embinit.tracking.trial_run.TrialRun.finish`) from its result dict (`TrialResult.to_dict`)."""
    rerun = {**flat_numbers(result.get("test") or {}), **flat_numbers(result.get("best") or {}, "best/")}
    # the result's test metrics include a translation's `oov/*` (embinit.train.oov_subset), logged under
    # those names: the record's are read too, else each would count as differing from a missing value
    recorded = {k: v for k, v in rec.metrics.items() if k.startswith(COMPARED) or k in rerun}
    return [MetricRow(n, recorded.get(n), rerun.get(n)) for n in sorted(set(recorded) | set(rerun))]


def comparison_text(rec: TrialRecord, rows: list[MetricRow], same_key: bool) -> str:
    """The comparison as a table (recorded, re-run, difference) and a verdict line: reproduced or not
    for the same key; for a different key (another computation) only how many differ."""
    if not any(r.recorded is not None for r in rows):
        return (f"the record has no test/* or best/* metrics (its status: {rec.status}): nothing to compare "
                f"the re-run with")

    def cell(v: float | None) -> str:
        return "-" if v is None else repr(v)
    table = [("metric", "recorded", "re-run", "difference")] + [
        (r.name, cell(r.recorded), cell(r.rerun), "0" if r.equal else
         "-" if r.difference is None else f"{r.difference:+.3g}") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    differ = [r.name for r in rows if not r.equal]
    close = all(r.difference is not None and math.isclose(r.rerun, r.recorded, rel_tol=CLOSE, abs_tol=1e-9)
                for r in rows if not r.equal)
    if not differ:
        kinds = " and ".join(sorted({f"{r.name.split('/')[0]}/*" for r in rows}))
        lines.append(f"reproduced: all {len(rows)} {kinds} metrics equal the record's")
    elif same_key and close:
        lines.append(f"reproduced to within a relative {CLOSE:g}: {len(differ)} of {len(rows)} metrics differ in "
                     f"their last digits ({', '.join(differ)}), as another machine's or library's floating-point "
                     f"arithmetic makes them")
    else:
        lines.append(("not reproduced: " if same_key else "a different key (another computation): ")
                     + f"{len(differ)} of {len(rows)} metrics differ from the record's ({', '.join(differ)})")
    if differ and len(rec.trained_on) > 1:
        lines.append(f"the record was resumed from a checkpoint on another device or thread count (its attempts "
                     f"trained on {' then '.join(rec.trained_on)}): a run trained on one of them from scratch "
                     "need not reproduce it exactly")
    return "\n".join(lines)
