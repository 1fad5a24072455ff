"""What a dry run says about the Hugging Face hub ids of a plan, before any trial reads one: a tokenizer
value that may be a typo ('spacey' has a hub id's shape), a hub id left unpinned, and a task read from its
hub dataset without a commit as its `data_revision`.

A trial's key holds a hub id as written. An unpinned id (`bert-base-uncased`) reads whatever snapshot
the cache or the hub has when the trial runs, so two runs of one key may read two snapshots once the
hub's `main` moves; its run's `embinit.hub_revision.*` tag names the commit read, but the key does not.
Pinned by commit (`bert-base-uncased@<commit>`, embinit.hf_cache), the key names the snapshot."""

from __future__ import annotations

from embinit.errors import EmbinitError
from embinit.hf_cache import COMMIT, hub_revision, snapshot, split_revision
from embinit.init.source_files import hub_ids


def tokenizer_lines(plan) -> list[str]:
    """A note for each tokenizer value that is no registered tokenizer nor a folder here nor in the hub
    cache: the trials load it as a Hugging Face hub id, which a dry run does not check (a typo such as
    'spacey' has that shape). A cached one is no typo (and offline, an uncached one is a spec problem)."""
    from embinit.tasks.tokenization import resolve_tokenizer, unregistered_hint
    lines = []
    for value in sorted({p.config.get("tokenizer") for p in plan} - {None, "auto"}):
        try:
            hub_id = resolve_tokenizer(value).identity == ("hf", value)
        except EmbinitError:   # a missing folder: the spec check reports it
            continue
        if hub_id and snapshot(value) is None and (hint := unregistered_hint(value)):
            lines.append(f"note: tokenizer {value!r} will be loaded as a Hugging Face hub id by the trials "
                         f"(not checked here): {hint}")
    return lines


def unpinned_lines(plan) -> list[str]:
    """A note for each hub id of the plan not pinned to a commit: what its trials' keys cannot tell apart,
    and, where the cache has it, the pin naming the snapshot it would read now."""
    ids = sorted({hub_id for p in plan for hub_id in hub_ids(
        p.config.get("init"), p.config.get("pretrained"), p.config.get("src_init"), p.config.get("src_pretrained"),
        p.config.get("tokenizer")).values()})
    lines = []
    for hub_id in ids:
        repo, revision = split_revision(hub_id)
        if revision is not None and COMMIT.fullmatch(revision):
            continue
        commit = hub_revision(hub_id)
        now = f"; it reads {repo}@{commit} here now: pin that to keep it" if commit else ""
        lines.append(f"note: hub id {hub_id!r} is not pinned to a commit: its trials' keys name the id, not the "
                     f"snapshot, which can change with the hub{now}")
    return lines


def dataset_lines(plan) -> list[str]:
    """A note for each task read from its hub dataset here whose `data_revision` is no commit (none given:
    the hub's `main`; a tag or branch, which can move): its trials' keys cannot tell two snapshots apart;
    where the hub cache has one, the commit that would be read now."""
    from embinit.task_registry import task_entry
    from embinit.tasks.hub import snapshot_commit
    from embinit.tasks.load import task_folder
    lines = []
    for task, revision in sorted({(p.config["task"], p.config.get("data_revision")) for p in plan
                                  if p.config.get("data_dir") is None}, key=str):
        entry = task_entry(task)
        if entry.generate or entry.hub is None or (revision is not None and COMMIT.fullmatch(revision)):
            continue
        try:
            if task_folder(task, None, revision) is not None:   # $EMBINIT_DATA_DIR/<task> is read, not the hub
                continue
        except EmbinitError:
            continue
        commit = snapshot_commit(task, revision)
        now = f"; it reads {entry.hub.path}@{commit} here now: data_revision: {commit} keeps it" \
            if commit else ""
        pin = f"data_revision {revision!r} is a tag or branch" if revision else "no data_revision pins it"
        lines.append(f"note: {task} reads its hub dataset and {pin}: its trials' keys do not name the snapshot, "
                     f"which can change with the hub{now}")
    return lines


def hub_notes(plan) -> list[str]:
    return tokenizer_lines(plan) + unpinned_lines(plan) + dataset_lines(plan)
