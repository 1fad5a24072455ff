"""Checkpoints: `last.pt` (everything needed to resume after a crash) and `best.pt` (the best model).

`last.pt` is written atomically (to a temporary file, then renamed) at the end of every epoch, so a
trial killed at any moment resumes from its last complete epoch. `last.json` beside it names the key and
epoch `last.pt` holds, so a sweep can tell which of two copies is newer without unpickling either.
The files' names and `last.json`'s writer and parser are embinit.checkpoint_files' (torch-free, shared
with embinit.storage).
Every checkpoint is read by `read` (trusted roots, weights only).
"""

from __future__ import annotations

import logging
import os
import random
import warnings
from pathlib import Path
from typing import Any

import torch

from embinit.checkpoint_files import (BEST, LAST, LAST_INFO, is_output_file, last_info_text, not_a_checkpoint,
                                      parse_last_info)
from embinit.errors import EmbinitError
from embinit.trusted import is_trusted, opened_path

log = logging.getLogger("embinit.train")


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def rng_state(dropout_generator: torch.Generator) -> dict:
    return {"dropout": dropout_generator.get_state(), "torch": torch.get_rng_state(),
            "python": random.getstate()}


def set_rng_state(state: dict, dropout_generator: torch.Generator) -> None:
    dropout_generator.set_state(state["dropout"])
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def save_last(out_dir: Path, key: str, model, optimizer, dropout_generator, progress: dict) -> None:
    """progress: epoch, step, history, best tracker, emb_stats_init, elapsed time, ..."""
    _atomic_save({"key": key, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                  "rng": rng_state(dropout_generator), "progress": progress}, out_dir / LAST)
    # written after last.pt: it never names an epoch not saved
    _atomic_text(out_dir / LAST_INFO, last_info_text(key, progress["epoch"]))


def last_epoch(out_dir: Path, key: str) -> int | None:
    """The epoch `out_dir`'s `last.pt` of trial `key` holds (from `last.json`, by
    `checkpoint_files.parse_last_info`), None without one or when `last.json` cannot say."""
    try:
        text = (Path(out_dir) / LAST_INFO).read_bytes()
    except OSError:
        return None
    epoch = parse_last_info(text, key)
    return epoch if epoch is not None and (Path(out_dir) / LAST).is_file() else None


class UnreadableCheckpoint(EmbinitError):
    """`last.pt` exists but cannot be read (a full disk, a damaged file system, a foreign file)."""


def read(path: str | Path, what: str = "checkpoint") -> dict:
    """The one reader of embinit's checkpoints (`last.pt`, `best.pt`, an `init_from`): only from inside
    the trusted roots (embinit.trusted), checked on the opened file, so a symlink swapped in after any
    earlier check is seen; and with `weights_only=True`: tensors and plain containers, never code."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise EmbinitError(f"{what} not found: {path}") from None
    with f:
        real = opened_path(f)
        if not is_trusted(real):  # unpickling runs code: only from inside the service's roots
            raise EmbinitError(f"{what} {path} lies outside the trusted roots ({real}); it is not loaded")
        try:
            return torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:  # truncated, foreign, or holding objects that are not weights
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            if (why := not_a_checkpoint(f)) is not None:   # torch's words for it: "pop from empty list"
                first = why
            raise UnreadableCheckpoint(f"cannot read {what} {path}: {first}") from None


def load_last(out_dir: Path, key: str) -> dict | None:
    path = out_dir / LAST
    if not path.is_file():
        return None
    ckpt = read(path)   # UnreadableCheckpoint when damaged (resume_state moves it aside)
    if ckpt.get("key") != key:
        raise EmbinitError(f"{path} belongs to trial {ckpt.get('key')!r}, not {key!r}; use another "
                           "out_dir (embinit train --out), or resume=False (--no-resume: this trial starts afresh "
                           "there and its checkpoints replace that trial's)")
    return ckpt


def resume_state(out_dir: Path, key: str) -> dict | None:
    """`load_last`, except that an unreadable `last.pt` means training from scratch (with a warning)
    rather than a failed trial: it is moved aside to `last.pt.corrupt` (kept to look at), `last.json`
    removed, and the trial starts again at epoch 1 in the same out_dir (in a sweep, the same MLflow
    run). A `last.pt` of another trial is still an error: that is a wrong out_dir, not damage."""
    try:
        return load_last(out_dir, key)
    except UnreadableCheckpoint as e:
        path = Path(out_dir) / LAST
        os.replace(path, path.with_name(LAST + ".corrupt"))
        (Path(out_dir) / LAST_INFO).unlink(missing_ok=True)
        message = f"{e}; training trial {key} from scratch (the file is kept as {LAST}.corrupt)"
        log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return None


def save_best(out_dir: Path, model, config: dict, vocabs: dict[str, list[str]], epoch: int) -> Path:
    """The format analyses read: model state, config, the embedding tables and their vocabularies."""
    embeddings = {k: e.weight.detach().float().cpu().clone() for k, e in model.embeddings().items()}
    path = out_dir / BEST
    _atomic_save({"model": model.state_dict(), "config": config, "embeddings": embeddings,
                  "vocabs": vocabs, "epoch": epoch}, path)
    return path


def save_outputs(out_dir: Path, outputs: dict[str, str]) -> list[Path]:
    """A task's test outputs ({file name: text}, `Task.test_outputs`) written into the trial's folder,
    each replaced whole; each name must be `checkpoint_files.output_file`'s form (the sweep logs only those)."""
    unknown = sorted(name for name in outputs if not is_output_file(name))
    if unknown:
        raise ValueError(f"test outputs {unknown} are not named as checkpoint_files.output_file names them "
                         "(<split>_<hypotheses|references|predictions|labels>.txt)")
    paths = []
    for name, text in outputs.items():
        path = Path(out_dir) / name
        _atomic_text(path, text)
        paths.append(path)
    return paths


def load_best(path: Path) -> dict:
    return read(path)
