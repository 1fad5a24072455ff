"""Loading a task through Hugging Face `datasets` by its usual hub name, when no local folder is given.

`convert` turns any mapping of split -> rows (a `DatasetDict`, or one built with
`load_dataset("json"/"csv"/"text", data_files=...)` from local files) into the same `RawData` the local
reader produces, so the tests exercise the real conversion without a network.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import re
import shutil
import socket
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

from embinit.cache_root import cache_root
from embinit.content_hash import file_digest
from embinit.errors import EmbinitError, offline_miss
from embinit.hf_cache import COMMIT, datasets_cache, hub_cache, hub_revision, set_flag
from embinit.task_registry import task_entry, task_kind
from embinit.task_types import Hub
from embinit.tasks import local
from embinit.tasks.hub_rows import convert
from embinit.tasks.raw import RawData

def hub_name(task: str) -> str:
    return task_entry(task).hub.name


def pinned_id(task: str, revision: str | None = None) -> str:
    """The hub id of `task`'s dataset repository, `<repo>@<revision>` where a `data_revision` pins it (the
    form embinit.hf_cache reads; the repository's, not the config's: `nyu-mll/glue@v1`, not `.../sst2`)."""
    return _pinned(task_entry(task).hub.path, revision)


def _pinned(path: str, revision: str | None) -> str:
    return f"{path}@{revision}" if revision is not None else path


def snapshot_commit(task: str, revision: str | None = None) -> str | None:
    """The commit of `task`'s hub dataset read here: the pinned revision's snapshot (a commit pinned is
    that commit, cached or not), else the one the hub cache's `main` names; None when unknown."""
    return _commit(task_entry(task).hub.path, revision)


def _commit(path: str, revision: str | None) -> str | None:
    """`snapshot_commit` of hub dataset repository `path`."""
    commit = hub_revision(_pinned(path, revision), "dataset")
    return commit or (revision if revision is not None and COMMIT.fullmatch(revision) else None)


def _load_dataset(path: str, config: str | None, revision: str | None = None) -> Any:
    """The one call that touches the network (tests replace it with a local `load_dataset`). Offline
    without a cached copy it fails at once instead of leaving `datasets` to retry for half a minute.
    `revision` (a `data_revision`) is passed only when given, so an unpinned call is as it always was."""
    _fail_fast_offline(path)
    import datasets
    pin = {"revision": revision} if revision is not None else {}
    ds = datasets.load_dataset(path, config, **pin) if config else datasets.load_dataset(path, **pin)
    if revision is not None and set_flag("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") is not None:
        _check_build(ds, path, revision)
    return ds


def _check_build(ds: Any, path: str, revision: str) -> None:
    """Offline, `datasets` does not look at `revision`: it reads the latest build its own cache holds of
    the dataset, whichever commit that was made from (its folder is named by the commit). Refuse a build
    of another commit than the pinned one, which the run's data source and the task cache would name."""
    want = _commit(path, revision)
    builds = {Path(f["filename"]).parent.name for split in ds.values() for f in getattr(split, "cache_files", ())}
    if want is not None and builds and builds != {want}:
        raise EmbinitError(
            f"{path}@{revision}: offline, `datasets` ignores the revision and read its cached build of "
            f"{', '.join(sorted(builds))}, not the pinned commit {want}; load the task once online with this "
            f"data_revision (which builds that commit), or give its data_dir")


def _hub_file(path: str, filename: str, revision: str | None = None) -> Path:
    """One file of hub dataset repository `path` (at `revision`, else its main), from the hub cache or
    downloaded into it (the other call that touches the network); offline without a cached copy it fails
    at once, as `_load_dataset` does."""
    _fail_fast_offline(path)
    from huggingface_hub import hf_hub_download
    return Path(hf_hub_download(path, filename, repo_type="dataset", revision=revision, cache_dir=hub_cache()))


def _unpacked(archive: Path) -> Path:
    """The folder the zip `archive` unpacks to, under embinit's cache, one per content (its sha256): unpacked
    once, into a temporary folder renamed into place, so a reader never sees half of it; `zipfile` keeps
    every member inside the folder."""
    target = cache_root() / "hub-archives" / file_digest(archive)
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
        try:
            os.replace(tmp, target)
        except OSError:   # another process unpacked it first
            shutil.rmtree(tmp, ignore_errors=True)
    entries = [p for p in target.iterdir() if not p.name.startswith((".", "__MACOSX"))]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else target   # the archive's top folder


def _load_archive(task: str, hub: Hub, splits: dict[str, str], revision: str | None, source: str) -> RawData:
    """The task's release files from the zip `hub.archive` of its hub repository (at `revision`, else its
    main), read as a local folder."""
    folder = _unpacked(_hub_file(hub.path, hub.archive, revision))
    raw = local.read_local(task, task_entry(task).layout, folder, splits)
    return dataclasses.replace(raw, loaded_from=source, extra_info={**raw.extra_info, "archive": hub.archive})


def _fail_fast_offline(path: str) -> None:
    """Before `datasets` or huggingface_hub is asked for hub dataset `path`: with no cached copy and the hub
    not to be asked, fail at once, not after their half a minute of retries."""
    if not _cached(path) and (why := unreachable()) is not None:
        raise ConnectionError(f"{why}, and it is not in the local cache")


def _cached(path: str) -> bool:
    """Whether the dataset has a copy in the local Hugging Face caches (datasets' or the hub's)."""
    return (any(datasets_cache().glob(path.replace("/", "___") + "*"))
            or (hub_cache() / f"datasets--{path.replace('/', '--')}").is_dir())


def offline_uncached(task: str) -> str | None:
    """Why `task`'s hub dataset (unpinned: a pin is checked with its revision) cannot load now: Hugging Face
    is declared offline and no local cache holds a copy; else None. Reads the flags only, with no network
    probe, so a preflight (the spec's check, the service's) stays fast; online, the trial fetches it."""
    entry = task_entry(task).hub
    var = set_flag("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    if entry is None or var is None or _cached(entry.path):
        return None
    return f"{var} is set, and it is not in the local cache"


def unreachable() -> str | None:
    """Why the hub cannot be asked now (declared offline, or its host does not answer), else None: checked
    before `datasets` is asked, which would spend half a minute in retries."""
    if (var := set_flag("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")) is not None:
        return f"{var} is set"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=5).close()
    except OSError as e:
        return f"{url.hostname} cannot be reached: {e.strerror or e}"
    return None


@dataclasses.dataclass(frozen=True)
class DataAdvice:
    """How the caller gives a task its local data, for the no-data error: the command line's
    (`CLI_ADVICE`) or the service's (`service.specs`), each naming its own flags, fields and settings."""

    not_given: str   # what was not given: "no --data-dir given"
    env: str         # the data root variable, as the caller knows it: "$EMBINIT_DATA_DIR"
    fix: str         # how to give it; `{task}`: the task's name


CLI_ADVICE = DataAdvice("no --data-dir given", "$EMBINIT_DATA_DIR",
                        "put the files in a folder and pass it with --data-dir (a spec's data_dir), or set "
                        "EMBINIT_DATA_DIR to a folder holding {task}/")


# The advice a trial's no-data error gives: its caller's, set for the trial by the sweep's worker
# (`advising`, from `SweepContext.advice`: the service's driver gives the service's), so the error, and
# the MLflow record of it, says what that caller can do; the command line's outside any `advising`.
_ADVICE: contextvars.ContextVar[DataAdvice] = contextvars.ContextVar("embinit_data_advice", default=CLI_ADVICE)


@contextmanager
def advising(advice: DataAdvice | None) -> Iterator[None]:
    """Within: a task without data is advised as `advice` says (None: as the command line says)."""
    token = _ADVICE.set(advice or CLI_ADVICE)
    try:
        yield
    finally:
        _ADVICE.reset(token)


def current_advice(advice: DataAdvice | None = None) -> DataAdvice:
    """`advice` when given, else the one in effect (`advising`; the command line's by default)."""
    return advice or _ADVICE.get()


def advised(text: str, advice: DataAdvice) -> str:
    """`text`, an error a trial recorded, with the command line's advice for a task without data said as
    `advice` says it (the service's view of a trial's error: a spec's data_dir and its data roots, not
    `--data-dir`). A trial writes its caller's advice itself (`advising`); this reads the records that
    still hold the command line's: those written before trials were told their caller (every trial then
    gave the command line's, the service's too), and those of a command-line sweep into the same store."""
    if CLI_ADVICE.not_given not in text:
        return text
    fix = re.escape(CLI_ADVICE.fix).replace(re.escape("{task}"), r"(\S+?)")
    text = re.sub(fix, lambda m: advice.fix.format(task=m[1]), text)
    return text.replace(CLI_ADVICE.not_given, advice.not_given).replace(CLI_ADVICE.env, advice.env)


def no_data_error(task: str, splits: dict[str, str], looked: str, why: str, advice: DataAdvice | None = None
                  ) -> EmbinitError:
    """`advice`: how the caller gives a task its data (None: the one in effect, `current_advice`)."""
    return EmbinitError(
        f"{task}: no local data ({looked}) and the Hugging Face dataset {hub_name(task)!r} could not be "
        f"loaded ({why}); {current_advice(advice).fix.format(task=task)} (needs: {_needs(task, splits)})")


def load_hub(task: str, splits: dict[str, str], looked: str, revision: str | None = None) -> RawData:
    """Download (or read from the Hugging Face cache) and convert, at `revision` (a `data_revision`: a
    commit, tag or branch) where one is pinned. `looked` says where local data was sought, for the error
    message when the hub is unreachable too. Offline, a pinned revision the hub cache lacks is refused
    naming what the cache holds (the spec's check says so first)."""
    hub = task_entry(task).hub
    source = f"hub:{hub_name(task)}" + (f"@{revision}" if revision is not None else "")
    if revision is not None and (why := offline_miss(pinned_id(task, revision), "dataset")) is not None:
        raise no_data_error(task, splits, looked, why)
    try:
        if hub.archive:
            return _load_archive(task, hub, splits, revision, source)
        ds = _load_dataset(hub.path, hub.config, **({"revision": revision} if revision is not None else {}))
    except EmbinitError:
        raise
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise no_data_error(task, splits, looked, f"{type(e).__name__}: {first[:200]}") from None
    return convert(task, ds, splits, source=source)


def _needs(task: str, splits: dict[str, str]) -> str:
    layout = task_entry(task).layout
    if task_kind(task).two_sided:
        files = ", ".join(f"{layout.files[s][0]}.{{{layout.src_lang},{layout.tgt_lang}}}" for s in splits)
        return files + (" or the unpacked de-en release archive" if layout.release else "")
    files = ", ".join(layout.files[s][0] for s in splits.values())
    return files + (" or the unpacked MultiNLI 1.0 release's multinli_1.0_*.jsonl" if layout.release else "")
