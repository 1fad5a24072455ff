"""A real S3 server (moto's, in a thread of the test process) on the loopback, and the environment that
points embinit's object store (embinit.storage) at a fresh bucket of it."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from embinit import storage
from embinit.storage import STORAGE_ENV


@contextmanager
def s3_server() -> Iterator[str]:
    """The endpoint URL of an S3 server listening on 127.0.0.1 (a free port), stopped after."""
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def use_store(monkeypatch, endpoint: str, prefix: str = "embinit") -> str:
    """Point this process (and the Ray it starts) at a new bucket of `endpoint`; returns the store's URI."""
    for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    storage._client.cache_clear()       # the clients read the environment once per process
    storage._filesystem.cache_clear()
    bucket = f"embinit-{uuid.uuid4().hex[:12]}"
    storage._client().create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/{prefix}"
    monkeypatch.setenv(STORAGE_ENV, uri)
    return uri


def objects(uri: str) -> list[str]:
    """Every object key under the store `uri`, relative to its prefix."""
    store = storage.Store.from_uri(uri)
    prefix = f"{store.prefix}/" if store.prefix else ""
    pages = storage._client().get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=prefix)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    return sorted(k[len(store.prefix) + 1:] if store.prefix else k for k in keys)
