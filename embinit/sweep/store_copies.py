"""The object store's copies of trial folders a spec no longer plans, and their removal under the key's
lease.

With the operator's object store (embinit.storage) every trial folder is mirrored to
`checkpoints/<experiment folder>/<key>/` (`Mirror`), and the copy outlives the trial as the node's folder
does (embinit.sweep.resume). On a cluster a key may have trained on another node, so this node has no
folder of it (embinit.sweep.trial_folders lists the node's) while the store keeps its `last.pt` and
`best.pt` (tens to hundreds of MB a trial). `retired` lists the copies whose key the spec does not plan,
with their sizes from the store's listing (nothing is downloaded but each copy's small `last.json`, for
its epoch); a copy whose key is in use is marked `held`: its lease (`claims/<experiment folder>/<key>.lease`,
embinit.sweep.claims) is live, or a process of this node holds the key's `<key>.lock`. `prune` removes
copies, each under its key's lease, taken without waiting (a key a live process holds is left, and said)
and released after, so no sweep claims the key while its copy goes. Which copies are the spec's own to
remove is decided by the caller, from the tracking store's records (embinit.cli.dry_run_store), as for
the node's folders.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from embinit.checkpoint_files import LAST_INFO, parse_last_info
from embinit.errors import EmbinitError
from embinit.storage import Mirror, Store
from embinit.sweep.claims import Lease
from embinit.sweep.trial_folders import key_in_use


@dataclass(frozen=True)
class Copy:
    """The store's copy of a trial folder whose key the spec does not plan."""

    key: str
    size: int              # bytes, summed from the store's listing
    epoch: int | None      # the epoch its last.json names; None: none there (stopped before its first epoch)
    held: bool             # its key is in use (a live lease, or this node's lock): not counted, not removed
    local: bool            # this node has a folder of the key too (embinit.sweep.trial_folders)


def location(store: Store, folder: str) -> str:
    """Where the experiment folder's copies are, as an `s3://` URI."""
    return f"s3://{store.path('checkpoints', folder)}"


def _unreadable(store: Store, folder: str, what: str, e: Exception) -> EmbinitError:
    return EmbinitError(f"the object store {store.uri} (EMBINIT_STORAGE_URI) cannot be {what} at "
                        f"{location(store, folder)}: {e}; check the bucket, AWS_ENDPOINT_URL and the credentials")


def listing(store: Store, folder: str) -> dict[str, list[dict]]:
    """key -> the objects of its copy under `checkpoints/<folder>/`, as the store lists them (`Key`,
    `Size`); an object outside a key's folder is none of them. EmbinitError when the store cannot be listed."""
    prefix = store.key("checkpoints", folder) + "/"
    out: dict[str, list[dict]] = {}
    try:
        pages = _client().get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=prefix)
        for page in pages:
            for o in page.get("Contents", []):
                key, sep, _ = o["Key"][len(prefix):].partition("/")
                if key and sep:
                    out.setdefault(key, []).append(o)
    except Exception as e:   # botocore's: no such bucket, endpoint unreachable, credentials refused
        raise _unreadable(store, folder, "listed", e) from None
    return out


def _client():
    """An S3 client (the node's endpoint and credentials, as `Store.client`'s) that gives up on a store it
    cannot reach within seconds: the dry run reads the store first with it, and botocore's defaults
    (60 s to connect, 5 attempts) would hold the plan back for minutes on a laptop away from the cluster."""
    import boto3
    from botocore.config import Config
    return boto3.client("s3", config=Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 2}))


def retired(store: Store, folder: str, planned: set[str], node_folder: Path) -> list[Copy]:
    """The copies under `checkpoints/<folder>/` whose key is not in `planned`, by key; `node_folder`: this
    node's folder of the experiment (`trial_folders.experiment_folder`, whose name is `folder`).
    EmbinitError when the store cannot be read."""
    found = listing(store, folder)
    out = []
    for key in sorted(k for k in found if k not in planned):
        objs = found[key]
        try:
            epoch = (_epoch(store, folder, key) if any(o["Key"].endswith(f"/{LAST_INFO}") for o in objs)
                     else None)
            held = key_in_use(node_folder, key) or Lease(store, f"{folder}/{key}").held()
        except Exception as e:
            raise _unreadable(store, folder, "read", e) from None
        out.append(Copy(key, sum(int(o.get("Size", 0)) for o in objs), epoch, held, (node_folder / key).is_dir()))
    return out


def _epoch(store: Store, folder: str, key: str) -> int | None:
    answer = store.client().get_object(Bucket=store.bucket, Key=store.key("checkpoints", folder, key, LAST_INFO))
    return parse_last_info(answer["Body"].read(), key)


@dataclass(frozen=True)
class Pruned:
    """What `prune` did: the copies removed, those left because their key is in use, and those it could
    not remove (with why)."""

    removed: list[Copy]
    held: list[Copy]
    failed: list[tuple[Copy, str]]


def prune(store: Store, folder: str, copies: list[Copy], node_folder: Path) -> Pruned:
    """Remove each copy under its key's lease (taken without waiting: a key whose lease a live process
    holds, or whose lock a process of this node holds, is left), released after. A copy counts as removed
    once the store lists nothing of it."""
    removed, held, failed = [], [], []
    for c in copies:
        lease = Lease(store, f"{folder}/{c.key}")
        try:
            if key_in_use(node_folder, c.key) or not lease.try_acquire():
                held.append(c)
                continue
        except Exception as e:   # the lease cannot be written (a read-only credential): nothing removed
            failed.append((c, f"its lease cannot be taken: {e}"))
            continue
        try:
            Mirror(store, folder, c.key).clear()
            left = store.client().list_objects_v2(Bucket=store.bucket, MaxKeys=1,
                                                  Prefix=store.key("checkpoints", folder, c.key) + "/")
            if left.get("KeyCount", 0):   # S3's multi-object delete answers per-object errors without raising
                failed.append((c, "objects of it remain after the delete"))
            else:
                removed.append(c)
        except Exception as e:
            failed.append((c, str(e)))
        finally:
            lease.release()
    return Pruned(removed, held, failed)
