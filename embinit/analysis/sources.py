"""Where the analyses get an embedding table: a checkpoint, a word-vector file, or an MLflow run.

`load_embeddings(source)` accepts
- a trainer checkpoint `best.pt` (its `embeddings` and `vocabs`; `key` picks `tok`, `tgt` or `src`,
  default the first of those present);
- a `.npy` matrix (tokens from its vocabulary file beside it when there is one, see
  `embinit.init.source_files.read_npy_vocab`; without one the rows are unnamed);
- a GloVe / word2vec / fastText text file or a word2vec binary file (read by `embinit.init`'s loaders; rows in
  file order, i.e. by frequency for GloVe; `top` keeps the first N words, read from the file's start
  without checking the rest of it; a repeated word keeps its first row, with a warning naming it);
- an MLflow run id (32 hex digits) or `runs:/<id>`: the run's `checkpoint/best.pt` artifact is
  downloaded (from `tracking_uri`, default MLflow's own resolution) and read as above.
Files are read by `embinit.init`'s readers, so an analysis reads the table an init built from the same
file gets. A source of 0 rows is an error naming it, not an empty table.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from embinit.cache_root import cache_root
from embinit.checkpoint_files import BEST_ARTIFACT
from embinit.errors import EmbinitError

TABLE_KEYS = ("tok", "tgt", "src")
_RUN_ID = re.compile(r"^(?:runs:/)?([0-9a-f]{32})/?$")


@dataclass
class Embeddings:
    matrix: torch.Tensor            # float32 [N, D]
    tokens: list[str] | None        # row names, None when unknown (a bare .npy)
    source: str                     # what was read, for messages and reports
    config: dict | None = None      # a checkpoint's trial config


def is_run_id(source: str) -> bool:
    return bool(_RUN_ID.match(str(source))) and not Path(source).exists()


def download_checkpoint(run_id: str, tracking_uri: str | None = None, dst: str | None = None) -> Path:
    """The local path of run `run_id`'s best.pt artifact (downloaded by `run_readers.artifact_file`); an
    error that says why a run the store holds has none (`_why_no_checkpoint`)."""
    from embinit.tracking import run_readers  # imports MLflow when it downloads; only needed for run ids

    rid = _RUN_ID.match(run_id).group(1)
    try:
        return run_readers.artifact_file(rid, BEST_ARTIFACT, dst, tracking_uri)
    except EmbinitError as e:
        why = _why_no_checkpoint(rid, tracking_uri)
        raise EmbinitError(f"{str(e).rstrip('.')}; {why}" if why else str(e)) from None


def _why_no_checkpoint(run_id: str, tracking_uri: str | None) -> str:
    """Why a run the store holds has no best.pt: it is a sweep's or an analysis's run, or a trial that kept
    none (its spec's `mlflow.log_checkpoint: false`, as the quickstart's). "" when the store has no such run
    (MLflow's own message says so)."""
    from embinit.tracking.mlflow_store import client
    from embinit.tracking.records import KIND_TAG

    try:
        run = client(tracking_uri).get_run(run_id)
    except Exception:  # MLflow raises several types for a run it does not have
        return ""
    name = run.info.run_name or "unnamed"
    if kind := run.data.tags.get(KIND_TAG):
        return (f"run {run_id} ({name}) is a {kind} run (embinit.kind={kind}), not a trial's: give the run id "
                "of one trial (a run named <label>-s<seed>)")
    return (f"the trial run {run_id} ({name}, {run.info.status}) logged no checkpoint: its spec set "
            f"mlflow.log_checkpoint: false (tune_configs/quickstart.yaml does), or it ended before its first "
            f"epoch; run the spec with log_checkpoint: true, or give a best.pt file")


def load_checkpoint(path: str | Path, key: str | None = None) -> Embeddings:
    from embinit.train.checkpoint import load_best

    path = Path(path)
    try:
        ckpt = load_best(path)
    except Exception as e:
        raise EmbinitError(f"cannot read checkpoint {path}: {e}") from None
    tables = ckpt.get("embeddings") if isinstance(ckpt, dict) else None
    if not tables:
        raise EmbinitError(f"{path} is not an embinit best.pt checkpoint (no 'embeddings' entry)")
    if key is None:
        key = next((k for k in TABLE_KEYS if k in tables), next(iter(tables)))
    if key not in tables:
        raise EmbinitError(f"{key!r} is not a table of {path}; choose from {sorted(tables)}")
    tokens = (ckpt.get("vocabs") or {}).get(key)
    return Embeddings(tables[key].detach().float().cpu(), list(tokens) if tokens else None,
                      f"{path}:{key}", ckpt.get("config"))


def load_vectors(path: str | Path, top: int | None = None) -> Embeddings:
    """All (or the first `top`) rows of a word-vector file, read by embinit.init's readers: the words of
    a text file (`vectors.words`) and the vocabulary of a .npy (`source_files.read_npy_vocab`) are the
    ones an init built from the same file uses."""
    from embinit.init import source_files, vectors
    from embinit.init.aligned import warn_duplicates

    path = source_files.check_file(path)
    fmt = source_files.detect_format(path)
    if fmt == "hf":
        raise EmbinitError(f"{path} is a Hugging Face model folder; build a table from it with "
                           "embinit.init and pass the table or a checkpoint instead")
    if fmt == "npy":
        arr = source_files.load_npy_matrix(path)
        names = source_files.read_npy_vocab(path, arr.shape[0]) if source_files.find_npy_vocab(path) else None
        matrix = torch.from_numpy(arr[:top].astype("float32"))
        return Embeddings(matrix, names[:top] if names is not None else None, str(path))
    words = vectors.words(path, top)
    load = vectors.load_word2vec_binary if fmt == "word2vec_bin" else vectors.load_text
    aligned = load(path, words, stop_when_found=top is not None)   # `top`: the file's first rows, not all of it
    warn_duplicates(aligned)
    if aligned.found.numel() != len(words):
        raise EmbinitError(f"{path}: read {aligned.found.numel()} rows for {len(words)} words")
    return Embeddings(aligned.rows, words, str(path))


def load_embeddings(source: str | Path, key: str | None = None, top: int | None = None,
                    tracking_uri: str | None = None) -> Embeddings:
    """An `Embeddings` from a checkpoint, vector file or MLflow run id (see the module docstring)."""
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise EmbinitError(f"top (--top) must be a positive number of rows, got {top!r}")   # -5 sliced from the end
    source = str(source)
    if is_run_id(source):
        from embinit.tracking.store_check import require_store
        require_store(tracking_uri)   # a store to read: an error saying what it is otherwise, nothing created
        # into embinit's own cache folder, a trusted root, where the one checkpoint reader reads it
        downloads = cache_root() / "downloads"
        downloads.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=downloads) as dst:
            path = download_checkpoint(source, tracking_uri, dst)
            emb = load_checkpoint(path, key)
        # the download is gone once read: name the run's artifact (what an analogy run records), not it
        emb.source = f"run {source} ({emb.source.replace(str(path), BEST_ARTIFACT, 1)})"
    else:
        path = Path(source).expanduser()
        if not path.exists():
            raise EmbinitError(f"embeddings not found: {source!r} is neither a file nor an MLflow run id")
        emb = load_checkpoint(path, key) if path.suffix in (".pt", ".pth") else load_vectors(path, top)
    if emb.matrix.shape[0] == 0:   # an analysis of nothing would report zeros, not the problem
        raise EmbinitError(f"{emb.source}: no rows to analyse (a table of 0 rows)")
    if top is not None and emb.matrix.shape[0] > top:
        emb = Embeddings(emb.matrix[:top], emb.tokens[:top] if emb.tokens else None, emb.source, emb.config)
    return emb
