"""The claim on a trial key across nodes: a lease object in the store (embinit.storage), taken and
renewed by compare-and-set, so two sweeps on different nodes never train one key at once.

`claims/<experiment folder>/<key>.lease` names its holder (`host:pid`, in the object's metadata) and a
fresh token, so every write has its own ETag. Taking it is a conditional PUT: `If-None-Match: *` when
there is none (of two claimers exactly one is answered 200, the other 412), `If-Match: <the ETag seen>`
to take over a lease that lapsed. A holder renews it every third of the TTL with `If-Match: <its last
ETag>`, and once more before each epoch's checkpoint goes to the store (`check`); a renewal answered 412
means another process took the key over (this one was silent longer than the TTL), so the holder stops
writing the key's checkpoint and metrics (`check` raises `ClaimLost`, which fails the attempt; Tune
retries it, and the retry waits for the key). Release deletes the lease, again only if its
ETag is still ours.

A lease lapses when the store's own clock says so: the age is the response's `Date` minus the object's
`Last-Modified`, both stamped by the store, so the nodes' clocks never need to agree. A lease held by a
process of this host that no longer runs (embinit.holders) is taken over at once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from email.utils import parsedate_to_datetime

from embinit.holders import holder_gone, holder_id
from embinit.storage import Store

log = logging.getLogger("embinit.sweep")
TTL_ENV = "EMBINIT_CLAIM_TTL_S"
DEFAULT_TTL_S = 60.0   # a holder silent this long (its node died, or lost the store) loses the key


class ClaimLost(RuntimeError):
    """Another process took this process's claim over; its checkpoint is no longer this one's to write."""


def ttl_s() -> float:
    return float(os.environ.get(TTL_ENV) or DEFAULT_TTL_S)


def check_store(store: Store) -> None:
    """EmbinitError unless the store refuses a second `If-None-Match: *` PUT of one key: a store that
    ignores the condition would let every claimer win, so a sweep does not start on one."""
    from embinit.errors import EmbinitError
    probe = Lease(store, f"_probe/{uuid.uuid4().hex}", ttl=1)
    try:
        if not probe._put(IfNoneMatch="*") or probe._put(IfNoneMatch="*"):
            raise EmbinitError(f"the object store {store.uri} ignores conditional writes (If-None-Match), "
                               "so two sweeps could train one key at once; use a store that supports them")
    except EmbinitError:
        raise
    except Exception as e:
        raise EmbinitError(f"the object store {store.uri} (EMBINIT_STORAGE_URI) cannot be written: {e}") from None
    finally:
        probe._stop.set()
        probe.release()


def unreachable(store: Store, error: BaseException) -> Exception:
    """Why a trial could not claim its key in the store, naming this node and what each node needs (seen:
    a Ray worker started without AWS_ENDPOINT_URL tried AWS itself, and its trials failed with only
    botocore's `Could not connect to the endpoint URL: "https://BUCKET.s3.amazonaws.com/..."`)."""
    import socket

    from embinit.errors import EmbinitError
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    said = f"AWS_ENDPOINT_URL={endpoint}" if endpoint else "AWS_ENDPOINT_URL is unset: AWS itself"
    return EmbinitError(f"the object store {store.uri} (EMBINIT_STORAGE_URI) cannot be reached from the Ray node "
                        f"{socket.gethostname()} ({said} here): {type(error).__name__}: {error}. Every Ray node "
                        "needs the store's endpoint (AWS_ENDPOINT_URL, unless the store is AWS S3) and its "
                        "credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or any AWS default source) "
                        "in the environment its `ray start` ran in (docs/deployment.md, Storage across nodes)")


class Lease:
    def __init__(self, store: Store, name: str, ttl: float | None = None):
        self.store, self.name = store, name
        self.object_key = store.key("claims", f"{name}.lease")
        self.ttl = ttl if ttl is not None else ttl_s()
        self.holder = holder_id()
        self.etag: str | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._renewing = threading.Lock()
        self._thread: threading.Thread | None = None

    def acquire(self, poll_s: float | None = None) -> Lease:
        """Take the lease, waiting while a live holder has it; then renew it in the background."""
        poll = poll_s if poll_s is not None else min(2.0, self.ttl / 6)
        while not self._take():
            time.sleep(poll)
        self._heartbeat_start()
        return self

    def try_acquire(self) -> bool:
        """Take the lease unless a live holder has it (False at once, nothing taken); renewed in the
        background while held, as `acquire`'s."""
        if not self._take():
            return False
        self._heartbeat_start()
        return True

    def held(self) -> bool:
        """Whether a live holder has the lease now: one `acquire` would wait for (not lapsed, not a
        process of this host that no longer runs)."""
        seen = self._seen()
        return seen is not None and not self._lapsed(seen)

    def _take(self) -> bool:
        """One attempt: a new lease, or the one there taken over when it lapsed; False while a live
        holder has it."""
        while not self._put(IfNoneMatch="*"):
            seen = self._seen()
            if seen is None:
                continue  # released between our PUT and HEAD: try again at once
            etag, holder, age = seen
            if self._lapsed(seen) and self._put(IfMatch=etag):
                log.warning("claim %s: took over the lease of %s (silent %.0f s)", self.name, holder, age)
                return True
            return False
        return True

    def _lapsed(self, seen: tuple[str, str, float]) -> bool:
        _, holder, age = seen
        return age > self.ttl or holder_gone(holder)

    def _heartbeat_start(self) -> None:
        self._thread = threading.Thread(target=self._heartbeat, name=f"claim-{self.name}", daemon=True)
        self._thread.start()

    def renew(self) -> bool:
        """Renew the lease now; False (and `lost` says why) when another process has taken it over."""
        with self._renewing:  # the heartbeat and `check` would otherwise race on one ETag
            if self.lost is None and not self._put(IfMatch=self.etag):
                self.lost = (f"the claim on trial key {self.name} was taken over by another process (this one "
                             f"did not renew it within {self.ttl:g} s); it no longer writes the key's checkpoint")
                log.warning(self.lost)
        return self.lost is None

    def check(self) -> None:
        """Renew the lease now (before each epoch's checkpoint goes to the store); ClaimLost when another
        process has taken it over."""
        if not self.renew():
            raise ClaimLost(self.lost)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost is None and self.etag is not None:
            try:
                self.store.client().delete_object(Bucket=self.store.bucket, Key=self.object_key, IfMatch=self.etag)
            except Exception as e:  # taken over meanwhile (412), or gone: it lapses by itself
                log.info("claim %s: lease not deleted (%s)", self.name, e)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if not self.renew():
                    return
            except Exception as e:  # the store is unreachable: try again; past the TTL another may take over
                log.warning("claim %s: lease not renewed (%s)", self.name, e)

    def _put(self, **condition: str) -> bool:
        """A conditional PUT of a fresh lease; False when the condition failed (another holder wrote)."""
        from botocore.exceptions import ClientError
        body = json.dumps({"holder": self.holder, "token": uuid.uuid4().hex, "written_at": time.time()})
        try:
            answer = self.store.client().put_object(Bucket=self.store.bucket, Key=self.object_key,
                                                    Body=body.encode(), Metadata={"holder": self.holder},
                                                    **condition)
        except ClientError as e:
            # 412: the condition failed; 409: a concurrent conditional write won; NoSuchKey: If-Match on
            # a lease deleted meanwhile (a missing bucket, NoSuchBucket, is an error)
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status in (409, 412) or e.response.get("Error", {}).get("Code") == "NoSuchKey":
                return False
            raise
        self.etag = answer["ETag"]
        return True

    def _seen(self) -> tuple[str, str, float] | None:
        """(ETag, holder, age in seconds by the store's clock) of the current lease, None when gone."""
        from botocore.exceptions import ClientError
        try:
            head = self.store.client().head_object(Bucket=self.store.bucket, Key=self.object_key)
        except ClientError as e:
            if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return None
            raise
        now = parsedate_to_datetime(head["ResponseMetadata"]["HTTPHeaders"]["date"])
        age = (now - head["LastModified"]).total_seconds()
        return head["ETag"], head.get("Metadata", {}).get("holder", ""), age
