"""A real S3 server (moto's) and the environment that points embinit's object store (embinit.storage)
at a fresh bucket of it. `s3_server` runs it in a thread of the test process; a cluster harness whose
nodes live elsewhere runs `moto_server -H ADDRESS -p PORT` instead and gives every node `store_env(...)`."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from embinit import storage
from embinit.storage import STORAGE_ENV

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@contextmanager
def s3_server(host: str = "127.0.0.1") -> Iterator[str]:
    """The endpoint URL of an S3 server listening on `host` (a free port), stopped after."""
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address=host, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def store_env(endpoint: str, prefix: str = "embinit") -> dict[str, str]:
    """A new bucket on `endpoint`, and the variables (store, endpoint, credentials) a node needs for it."""
    import boto3
    bucket = f"embinit-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                 region_name=CREDENTIALS["AWS_DEFAULT_REGION"]).create_bucket(Bucket=bucket)
    return {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, STORAGE_ENV: f"s3://{bucket}/{prefix}"}


def use_store(monkeypatch, endpoint: str, prefix: str = "embinit") -> str:
    """Point this process (and the Ray it starts) at a new bucket of `endpoint`; returns the store's URI."""
    env = store_env(endpoint, prefix)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    storage._client.cache_clear()       # the clients read the environment once per process
    storage._filesystem.cache_clear()
    return env[STORAGE_ENV]


def objects(uri: str) -> list[str]:
    """Every object key under the store `uri`, relative to its prefix."""
    store = storage.Store.from_uri(uri)
    prefix = f"{store.prefix}/" if store.prefix else ""
    pages = storage._client().get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=prefix)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    return sorted(k[len(prefix):] for k in keys)
