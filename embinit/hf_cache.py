"""Hugging Face hub ids and where Hugging Face keeps its local caches.

A hub id may pin a snapshot as `<repo id>@<revision>` (a commit, a tag or a branch: `bert-base-uncased@
86b5e0934494bd15c9632b12f734a8a67f723594`), which every loader passes on as `revision=`; without one it
reads the repository's `main`. The caches' locations, and whether Hugging Face is told to stay offline, are
read from the environment at call time (huggingface_hub fixes its own constants when it is imported, so a
process that sets HF_HUB_OFFLINE or HF_HOME later, as the service and the tests do, would not be seen)."""

from __future__ import annotations

import os
import re
from pathlib import Path

TRUE = {"1", "on", "yes", "true"}


def set_flag(*names: str) -> str | None:
    """The first of the environment variables `names` that is set to a true value, else None."""
    return next((n for n in names if os.environ.get(n, "").strip().lower() in TRUE), None)


def hf_home() -> Path:
    return Path(os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface")


def hub_cache() -> Path:
    return Path(os.environ.get("HF_HUB_CACHE") or hf_home() / "hub").expanduser()


def datasets_cache() -> Path:
    return Path(os.environ.get("HF_DATASETS_CACHE") or hf_home() / "datasets").expanduser()


COMMIT = re.compile(r"[0-9a-f]{40}")
# What a revision may be written as (a commit, a tag or a branch: `v1`, `refs/pr/3`): no `..`, no leading
# `/` or `.`, so naming it can never lead out of a repository's `refs/` folder (service.paths.HUB_ID's rule)
REVISION = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_./-]{0,254}")


def split_revision(name: str) -> tuple[str, str | None]:
    """(repo id, revision) of a hub id written `<repo id>@<revision>`, else (`name`, None). A local path is
    never split (a folder's name may hold an `@`); hub repository ids cannot."""
    if "@" not in name or Path(name).expanduser().exists():
        return name, None
    repo, _, revision = name.partition("@")
    return repo, revision


def path_shaped(name: str) -> bool:
    """Whether a value that names no file reads as a path, not a hub id (`name` or `org/name`, pinned or
    not): `./x`, `/x`, `~/x`, `a/b/c`."""
    repo = split_revision(name)[0]
    return repo.startswith((".", "/", "~")) or repo.count("/") > 1


def _repo_folder(repo: str, repo_type: str = "model") -> Path:
    return hub_cache() / f"{repo_type}s--{repo.replace('/', '--')}"


def revision_problem(name: str) -> str | None:
    """What is wrong with the pin of hub id `name` (`org/model@` with no revision), else None."""
    repo, revision = split_revision(name)
    if revision is not None and (not repo or not revision.strip()):
        return (f"{name!r}: a pinned hub id is <repo id>@<revision> (a commit, tag or branch), "
                f"e.g. 'bert-base-uncased@86b5e0934494bd15c9632b12f734a8a67f723594'")
    return None


def pin_problem(revision: object) -> str | None:
    """What is wrong with `revision` as a pin of a hub repository's snapshot (a spec's `data_revision`),
    else None: it must name a commit, a tag or a branch."""
    if not isinstance(revision, str) or not revision.strip():
        return f"a revision names a commit, a tag or a branch (e.g. 'v1', 'main' or 40 hex digits), got {revision!r}"
    if not REVISION.fullmatch(revision):
        return (f"{revision!r} is not a revision: a commit, a tag or a branch is letters, digits, '_', '-', '.' "
                f"and '/', starting with a letter or digit, without '..'")
    return None


def hub_revision(repo_id: str, repo_type: str = "model") -> str | None:
    """The commit of the snapshot of hub repository `repo_id` (pinned as `<repo id>@<revision>`, else its
    `main`) that loading it reads here: a pinned commit whose snapshot is cached, else the commit the
    cache's `refs/<revision>` names (written when it was downloaded); None when none is cached (a dataset
    `datasets` keeps in its own cache only, say)."""
    repo, revision = split_revision(repo_id)
    folder = _repo_folder(repo, repo_type)
    if revision is not None and COMMIT.fullmatch(revision):
        return revision if (folder / "snapshots" / revision).is_dir() else None
    if revision is not None and not REVISION.fullmatch(revision):   # no ref could be named so (`../x`)
        return None
    try:
        commit = (folder / "refs" / (revision or "main")).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return commit or None


def offline() -> str | None:
    """The variable that keeps Hugging Face off the network (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE), else None."""
    return set_flag("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def snapshot(hub_id: str, repo_type: str = "model") -> Path | None:
    """The cached snapshot folder that hub id `hub_id` (pinned or not) is read from offline, None when
    the cache holds none: what transformers finds with `local_files_only`."""
    commit = hub_revision(hub_id, repo_type)
    folder = _repo_folder(split_revision(hub_id)[0], repo_type) / "snapshots" / (commit or "-")
    return folder if commit and folder.is_dir() else None


def cached_revisions(hub_id: str, repo_type: str = "model") -> list[str]:
    """What the hub cache holds of hub id `hub_id`'s repository (any pin ignored): each ref with its
    commit (`main = <commit>`), then each snapshot no ref names (`commit <commit>`); [] when nothing."""
    folder = _repo_folder(split_revision(hub_id)[0], repo_type)
    refs = {}
    for ref in sorted((folder / "refs").rglob("*")) if (folder / "refs").is_dir() else ():
        try:
            refs[ref.relative_to(folder / "refs").as_posix()] = ref.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
    commits = sorted(p.name for p in (folder / "snapshots").iterdir() if p.is_dir()) \
        if (folder / "snapshots").is_dir() else []
    return [f"{ref} = {commit}" for ref, commit in refs.items() if commit in commits] + \
        [f"commit {c}" for c in commits if c not in refs.values()]


def not_cached(hub_id: str, repo_type: str = "model") -> str:
    """Why hub id `hub_id` cannot be read from the cache: the revision it asks for, and what the cache holds
    of that repository instead, so a wrong or shortened pin can be corrected from the message."""
    repo, revision = split_revision(hub_id)
    held = cached_revisions(hub_id, repo_type)
    if not held:
        return f"{repo!r} is not in the Hugging Face cache {hub_cache()} at any revision"
    asked = f"revision {revision!r}" if revision is not None else "its main branch"
    hint = ""
    if revision is not None and re.fullmatch(r"[0-9a-f]{4,39}", revision):
        prefixed = [h.split()[-1] for h in held if h.split()[-1].startswith(revision)]
        hint = (f" (a commit is pinned by all 40 hex digits: did you mean {repo}@{prefixed[0]}?)"
                if len(set(prefixed)) == 1 else " (a commit is pinned by all 40 hex digits)")
    return f"{asked} of {repo!r} is not in the Hugging Face cache {hub_cache()}, which holds {'; '.join(held)}{hint}"


def snapshot_text(hub_id: str) -> str:
    """`<repo id>@<commit>` of the snapshot hub id `hub_id` reads here, as a run's provenance says it (a pin
    that is no commit is said beside: `org/model@<commit> (pinned: v1)`)."""
    repo, revision = split_revision(hub_id)
    commit = hub_revision(hub_id)
    pinned = f" (pinned: {revision})" if revision is not None and revision != commit else ""
    return f"{repo}@{commit or 'unknown (not in the hub cache)'}{pinned}"
