"""The files of a trial's checkpoint folder, named once, and the one reader of each side file.

A trial's folder (`out_dir`; in a sweep the claimed folder of embinit.sweep.resume, which
embinit.storage.Mirror copies through the operator's object store) holds
- `last.pt`: everything a resume needs, and `best.pt`: the best model (both written by
  embinit.train.checkpoint and read only by `checkpoint.read`: trusted roots, weights only);
- `last.json`: `{"key": K, "epoch": E}`, the epoch `last.pt` of trial K holds, so a sweep can tell which
  of two copies (the node's, the store's, a Tune restore) is newer without unpickling either;
  `last_info_text` writes it and `parse_last_info` is its one parser (embinit.train.checkpoint.last_epoch
  on disk, embinit.storage.Mirror.epoch in the store);
- `init_embedding_sample.npz`: a sample of the initial embedding table for the histogram plot
  (embinit.sweep.reporting), plain arrays only: `read_init_sample` loads it with `allow_pickle=False`.
  Every file here may have come through the object store, so nothing here ever unpickles;
- the per-example outputs of the best checkpoint (`is_output_file`; written by
  embinit.train.lifecycle.finish from `Task.test_outputs`), one line per example in the split's order
  (the pairs as read: a line blank in both parallel files is no pair, so it has no line here):
  a translation trial's `test_hypotheses.txt` and `test_references.txt`, the exact strings `test/bleu`
  scored, so a researcher can run sacrebleu's own significance tests (`sacrebleu test_references.txt -i
  A/test_hypotheses.txt B/... --paired-bs`) or read the translations; a classifier's
  `<split>_predictions.txt` and `<split>_labels.txt` (label ids) per evaluation split at the selected
  checkpoint (the criterion's best epoch: the examples `selected/val/*` counted, for McNemar's test
  between two trials; MNLI's mismatched split at the matched-best epoch, not at its own best).

The sweep logs `best.pt` as the MLflow artifact `BEST_ARTIFACT` (`checkpoint/best.pt`), which the
analyses download (embinit.analysis.sources), and the test outputs under `OUTPUTS_ARTIFACT_DIR`
(`outputs/`).

Torch-free and MLflow-free: the API's side (embinit.storage) imports it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from embinit.errors import EmbinitError

LAST, BEST, LAST_INFO = "last.pt", "best.pt", "last.json"
BEST_ARTIFACT_DIR = "checkpoint"                       # the MLflow artifact folder best.pt is logged to
BEST_ARTIFACT = f"{BEST_ARTIFACT_DIR}/{BEST}"          # the artifact path of a run's best.pt
INIT_SAMPLE = "init_embedding_sample.npz"
OLD_INIT_SAMPLE = "init_embedding_sample.npy"          # the pickled format before; never loaded
TEST_HYPOTHESES, TEST_REFERENCES = "test_hypotheses.txt", "test_references.txt"
OUTPUT_KINDS = ("hypotheses", "references", "predictions", "labels")
_OUTPUT_FILE = re.compile(rf"[A-Za-z0-9_-]+_(?:{'|'.join(OUTPUT_KINDS)})\.txt")
OUTPUTS_ARTIFACT_DIR = "outputs"                       # the MLflow artifact folder of the output files


def output_file(split: str, kind: str) -> str:
    """The file name of `kind` (one of OUTPUT_KINDS) outputs of evaluation split `split` (characters a
    file name should not hold become `_`)."""
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"output kind {kind!r} is not one of {list(OUTPUT_KINDS)}")
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', split) or 'split'}_{kind}.txt"


def is_output_file(name: str) -> bool:
    """Whether `name` is a per-example output file (`output_file`'s form): what the sweep logs as such."""
    return bool(_OUTPUT_FILE.fullmatch(name))


def lines_text(sentences: list[str]) -> str:
    """Sentences as a file of one sentence a line (a `\n` or `\r` inside one, which no detokenizer writes,
    becomes a space, so line i stays sentence i as a file reader splits lines; other characters are kept
    as they were scored)."""
    return "".join(s.replace("\r\n", " ").replace("\n", " ").replace("\r", " ") + "\n" for s in sentences)


def last_info_text(key: str, epoch: int) -> str:
    """The text of `last.json` for trial `key`'s `last.pt` holding `epoch`."""
    return json.dumps({"key": key, "epoch": int(epoch)})


def parse_last_info(text: str | bytes, key: str) -> int | None:
    """The epoch a `last.json` of text `text` names for trial `key`; None when it names another trial,
    or is not one (not JSON, not an object, no whole non-negative `epoch`): no resume is taken from a
    file that cannot say which epoch it holds."""
    try:
        info = json.loads(text)
    except ValueError:  # also a UnicodeDecodeError of bytes that are no text
        return None
    if not isinstance(info, dict) or info.get("key") != key:
        return None
    epoch = info.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        return None
    return epoch


def write_init_sample(path: Path, values, shape: tuple[int, int]) -> Path:
    """Save `values` (a 1-D sample of the table) and the table's `shape` as plain arrays (`.npz`)."""
    import numpy as np
    path = Path(path)
    with path.open("wb") as f:  # a file object: np.savez would append ".npz" to another suffix
        np.savez(f, values=np.asarray(values, dtype=np.float32).reshape(-1),
                 shape=np.asarray(tuple(shape), dtype=np.int64))
    return path


def read_init_sample(path: Path):
    """`(values, (rows, cols))` of an init sample written by `write_init_sample`. Loaded with
    `allow_pickle=False`: a file holding a pickle (the old `.npy` of a dict, or anything crafted) raises
    EmbinitError saying so, without being unpickled; so does any other file that is not such an `.npz`."""
    import numpy as np
    path = Path(path)

    def refused(why: str) -> EmbinitError:
        return EmbinitError(f"cannot read the init sample {path}: {why}")

    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise refused("an .npy array, not the .npz of 'values' and 'shape'")
        with data:
            if sorted(data.files) != ["shape", "values"]:
                raise refused(f"it holds {sorted(data.files)}, not 'values' and 'shape'")
            values, shape = data["values"], data["shape"]
    except EmbinitError:
        raise
    except Exception as e:  # missing, truncated, not numpy's format, or a pickle (refused, never loaded)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        hint = " (a pickle is never loaded from a trial folder)" if "pickle" in first.lower() else ""
        raise refused(first + hint) from None
    if values.ndim != 1 or values.dtype.kind != "f" or shape.shape != (2,) or shape.dtype.kind not in "iu" \
            or (shape <= 0).any():
        raise refused(f"'values' must be a 1-D float array and 'shape' two positive integers (got "
                      f"{values.dtype}{list(values.shape)} and {shape.dtype}{list(shape.shape)})")
    return values, (int(shape[0]), int(shape[1]))


def not_a_checkpoint(f) -> str | None:
    """Why the open file `f` is no checkpoint torch.save wrote, from its first bytes (a GloVe file given as
    `init_from` failed with torch's "pop from empty list"), or None when it may be one: the zip archive
    torch.save writes since PyTorch 1.6 (a cut one too: torch's error says what is wrong with it) or an
    older pickle."""
    f.seek(0)
    head = f.read(40)
    f.seek(0)
    if head.startswith((b"PK\x03\x04", b"\x80")):   # a zip's first entry; pickle's protocol opcode
        return None
    return f"not a PyTorch checkpoint (a trial's best.pt: the zip archive torch.save writes); it starts with {head!r}"
