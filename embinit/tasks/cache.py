"""On-disk cache of tokenized splits and vocabularies, so a second trial on a task starts in seconds.

An entry is keyed by sha256 of everything it depends on (task, file identities or hub name, tokenizer
identity, min_freq, max_train_examples, max_len, lowercase, split choice, seed for generated tasks, code
versions); a change in any of them is a miss, never a stale hit. Entries are pickles written to a
temporary file and renamed into place, so concurrent trials never read a half-written entry. The cache
lives in the user's own directory (`$EMBINIT_CACHE_DIR/tasks`, else `~/.cache/embinit/tasks`); only
embinit writes there.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from embinit.cache_root import cache_root as shared_cache_root
from embinit.errors import EmbinitError
from embinit.trusted import is_trusted
from embinit.vocab import Vocab

# Bumped whenever a change here changes the tokenized data of a task (part of every key).
DATA_VERSION = "5"   # 5: blank parallel lines skipped or refused; a tokenizer without a vocabulary refused
FORMAT = 1


def cache_root(cache_dir: str | Path | None) -> Path:
    """`cache_dir` (or $EMBINIT_CACHE_DIR, else ~/.cache/embinit) is a root shared by embinit's caches;
    task entries go to its `tasks/` subfolder."""
    return shared_cache_root(cache_dir) / "tasks"


def cache_key(parts: dict[str, Any]) -> str:
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


def entry_path(root: Path, task: str, key: str) -> Path:
    return root / f"{task}-{key}.pkl"


def load(path: Path) -> dict | None:
    """The cached payload, or None when absent, unreadable or from another format (rebuilt then)."""
    if not is_trusted(path):  # a symlink leading out of the service's roots: never unpickle it
        return None
    try:
        with open(path, "rb") as f:
            payload = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception:  # a truncated or foreign file is a miss, and will be overwritten
        return None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        return None
    return {k: _vocab_from_plain(v) for k, v in payload.items()}


# Vocabularies are stored as plain lists and dicts, not pickled `Vocab` objects, so an entry stays
# readable when the Vocab class changes.
def _vocab_to_plain(value):
    if isinstance(value, Vocab):
        return {"__vocab__": value.tokens, "counts": value.counts, "specials": list(value.specials)}
    return value


def _vocab_from_plain(value):
    if isinstance(value, dict) and "__vocab__" in value:
        return Vocab(value["__vocab__"], value["counts"], value["specials"])
    return value


def save(path: Path, payload: dict) -> None:
    """Write atomically: a temporary file in the same folder, then rename over the entry. Outside the
    trusted roots (embinit.trusted) nothing is written: the entry could never be loaded."""
    if not is_trusted(path):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise EmbinitError(f"cannot write the task cache in {path.parent}: {e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            plain = {k: _vocab_to_plain(v) for k, v in payload.items()}
            pickle.dump({**plain, "format": FORMAT}, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)   # mkstemp makes it owner-only; a shared cache folder should stay readable
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
