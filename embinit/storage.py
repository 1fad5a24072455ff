"""Storage every node reaches: an S3-compatible object store, for the trial folders a resume needs and
for Ray Tune's own storage.

The operator names it in the environment of the API, the driver and every Ray node:
`EMBINIT_STORAGE_URI=s3://BUCKET[/PREFIX]`, with the endpoint in `AWS_ENDPOINT_URL` (MinIO, Ceph, a
cloud's S3; unset: AWS) and the credentials in the usual `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`
(or any source of the AWS default chain). Both clients read these themselves: pyarrow.fs (the mirror
below, and Ray Tune, which takes an `s3://` storage path natively) and boto3 (the conditional writes of
the per-key claim, embinit.sweep.claims, which pyarrow.fs does not offer). It is an environment setting,
never a spec field: a store named by a request could send the checkpoints (and the credentials' reach)
anywhere, and feed trials files of the author's choosing.

Without the variable nothing here is used: trial folders stay on the node's disk and the claim is a
`flock` beside them (embinit.sweep.resume).

Layout under `s3://BUCKET/PREFIX/`: `ray_results/` (Tune), `checkpoints/<experiment folder>/<key>/<file>`
(a trial folder's copy), `claims/<experiment folder>/<key>.lease` (the claim).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from embinit.checkpoint_files import LAST, LAST_INFO, parse_last_info
from embinit.errors import EmbinitError

STORAGE_ENV = "EMBINIT_STORAGE_URI"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PREFIX = re.compile(r"^[A-Za-z0-9_.=-]+(/[A-Za-z0-9_.=-]+)*$")


@dataclass(frozen=True)
class Store:
    """An S3 bucket and a key prefix in it (no leading or trailing slash; may be empty)."""

    bucket: str
    prefix: str = ""

    @classmethod
    def from_uri(cls, uri: str) -> Store:
        m = re.fullmatch(r"s3://([^/]+)/?(.*)", uri.strip())
        prefix = m.group(2).strip("/") if m else ""
        if m is None or not _BUCKET.match(m.group(1)) or (prefix and not _PREFIX.match(prefix)) or \
                any(p in (".", "..") for p in prefix.split("/")):
            raise EmbinitError(f"{STORAGE_ENV}={uri!r} is not an S3 location; expected s3://BUCKET[/PREFIX] "
                               "(a bucket name of 3-63 lowercase letters, digits, dots and hyphens)")
        return cls(m.group(1), prefix)

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def key(self, *parts: str) -> str:
        """The object key of `parts` under the prefix."""
        return "/".join(p for p in (self.prefix, *parts) if p)

    def path(self, *parts: str) -> str:
        """`bucket/key`, as pyarrow.fs names objects."""
        return f"{self.bucket}/{self.key(*parts)}"

    def tune_storage(self) -> str:
        """Ray Tune's `storage_path`: its experiment state and trial checkpoints in the store."""
        return f"s3://{self.path('ray_results')}"

    def filesystem(self):
        return _filesystem(self.bucket)

    def client(self):
        return _client()


def configured() -> str | None:
    """The store the operator configured (`EMBINIT_STORAGE_URI`, checked), None when unset."""
    value = os.environ.get(STORAGE_ENV, "").strip()
    return Store.from_uri(value).uri if value else None


@cache
def _filesystem(bucket: str):
    """pyarrow's S3 filesystem; endpoint, region and credentials from this node's environment."""
    from pyarrow import fs
    return fs.FileSystem.from_uri(f"s3://{bucket}")[0]


@cache
def _client():
    import boto3  # the conditional writes of the claim (If-None-Match / If-Match)
    return boto3.client("s3")


def _push_order(name: str) -> tuple:
    return (name == LAST_INFO, name != LAST, name)


@dataclass
class Mirror:
    """The store's copy of one trial folder, at `checkpoints/<experiment folder>/<key>/`.

    `push` (at each epoch end, after the trainer saved) uploads the files that changed since the last
    push: `last.pt` before `last.json`, so the store's `last.json` never names an epoch whose `last.pt`
    it lacks; each file is one object written whole (an S3 PUT, or a multipart upload, is atomic: a
    reader sees the old object or the new one). `pull` fetches the copy into the node's own folder,
    each file to a temporary name there and then renamed, so a reader never sees half a file."""

    store: Store
    folder: str                                  # the experiment folder's name (node-independent)
    key: str
    lease: Any = None                            # embinit.sweep.claims.Lease: push only while held
    sent: dict[str, tuple[int, int]] = field(default_factory=dict)

    def _remote(self, name: str = "") -> str:
        return self.store.path("checkpoints", self.folder, self.key, name).rstrip("/")

    def push(self, local: Path) -> None:
        if self.lease is not None:
            self.lease.check()  # another node took the key over: do not overwrite its checkpoint
        fs = self.store.filesystem()
        files = [p for p in local.iterdir() if p.is_file() and not p.name.endswith((".tmp", ".corrupt"))]
        for p in sorted(files, key=lambda p: _push_order(p.name)):
            st = p.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if self.sent.get(p.name) == stamp:
                continue
            with p.open("rb") as src, fs.open_output_stream(self._remote(p.name)) as dst:
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
            self.sent[p.name] = stamp

    def epoch(self) -> int | None:
        """The epoch of the store's `last.pt` of this key (from its `last.json`, by
        `checkpoint_files.parse_last_info`, as the node's own), None without one or when it cannot say."""
        try:
            with self.store.filesystem().open_input_stream(self._remote(LAST_INFO)) as f:
                text = f.read()
        except (OSError, ValueError):  # no such object; pyarrow's ArrowInvalid is a ValueError
            return None
        return parse_last_info(text, self.key)

    def pull(self, local: Path) -> None:
        """Replace `local`'s files by the store's copy (the caller found the copy newer)."""
        from pyarrow import fs as pafs
        fs = self.store.filesystem()
        infos = fs.get_file_info(pafs.FileSelector(self._remote(), allow_not_found=True))
        names = [i.base_name for i in infos if i.type == pafs.FileType.File]
        for name in sorted(names, key=_push_order):  # as pushed: a local last.json never overstates
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=local)  # O_EXCL: no symlink
            with os.fdopen(fd, "wb") as dst, fs.open_input_stream(self._remote(name)) as src:
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
            os.replace(tmp, local / name)
        self.sent = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in local.iterdir() if p.is_file()}

    def clear(self) -> None:
        """Remove the store's copy (the trial has its result, or can never resume)."""
        # boto3, not pyarrow: pyarrow's delete leaves an empty "directory" object behind in the parent
        client, prefix = self.store.client(), self.store.key("checkpoints", self.folder, self.key) + "/"
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.store.bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=self.store.bucket, Delete={"Objects": keys, "Quiet": True})
        self.sent.clear()
