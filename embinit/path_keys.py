"""The keys that name files, declared once: wherever one appears in a spec (top level, per task, per
init, in `analyses`) or in a `TrialConfig`, its value is a path (or, for some, a hub id, a tokenizer
name or an MLflow run id). Every list of them is derived here:

- `DATA_KEYS`, `PRETRAINED_KEYS` (`PATH_KEYS` both): what the service confines to its data and
  pretrained roots (service/paths.py), and what `ExperimentSpec.paths()` lists;
- `NOT_A_FILE`: per pretrained key, what a value naming no file may be instead (service/paths.py);
- `FILE_FIELDS`: the `TrialConfig` fields whose file a trial reads, hashed by content into its key
  (embinit.file_inputs).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PathKey:
    root: str                # "data": a folder a trial reads or writes; "pretrained": a file (or id) it reads
    not_a_file: str | None   # what a value naming no file may be instead ("hub id", "tokenizer", "run id")
    trial_input: bool        # a TrialConfig field: its file's content is part of the trial key


PATH_KEYS_DECLARED: dict[str, PathKey] = {
    "data_dir": PathKey("data", None, trial_input=True),
    "cache_dir": PathKey("data", None, trial_input=False),
    "snapshot_dir": PathKey("data", None, trial_input=False),     # analyses.similarity writes there
    "pretrained": PathKey("pretrained", "hub id", trial_input=True),
    "src_pretrained": PathKey("pretrained", "hub id", trial_input=True),
    "tokenizer": PathKey("pretrained", "tokenizer", trial_input=True),
    "reference": PathKey("pretrained", "run id", trial_input=False),  # analyses.similarity's fixed table
    "init_from": PathKey("pretrained", None, trial_input=True),       # a checkpoint (best.pt)
}

DATA_KEYS = tuple(k for k, v in PATH_KEYS_DECLARED.items() if v.root == "data")
PRETRAINED_KEYS = tuple(k for k, v in PATH_KEYS_DECLARED.items() if v.root == "pretrained")
PATH_KEYS = DATA_KEYS + PRETRAINED_KEYS
NOT_A_FILE = {k: PATH_KEYS_DECLARED[k].not_a_file for k in PRETRAINED_KEYS}
FILE_FIELDS = tuple(k for k, v in PATH_KEYS_DECLARED.items() if v.trial_input)
