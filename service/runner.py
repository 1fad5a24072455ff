"""How experiments run: never in the API process, but as one Ray driver per experiment.

The driver is a detached, named Ray actor (`embinit-exp-<id>` in the service's namespace) that calls
`embinit.sweep.run_sweep` in a thread and answers `poll()` / `cancel()` meanwhile. Detached means it
outlives the API process: a restarted API finds it by name and asks it for the state; a driver that is
gone (finished and collected, or lost with its node) is reconciled from MLflow (`service.state`).
The driver takes no CPU, so it never holds a slot a trial could use.

The API talks to drivers through the small `Runner` protocol, so tests can substitute an in-process fake
(`service.fakes.FakeRunner`) and the real one is exercised by the integration test.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import Future
from collections.abc import Callable
from typing import Any, Protocol

from embinit.errors import EmbinitError
from embinit.storage import STORAGE_ENV
from embinit.trusted import TRUSTED_ROOTS_ENV
from service.driver import DriverState, ExperimentDriver


def driver_env(trusted_roots: list[str] | None) -> dict[str, Any] | None:
    """The runtime env of a driver and the trials it starts (which inherit it): the service's trusted
    roots (pickles are loaded only from inside them, embinit.trusted) and the operator's object store
    (embinit.storage). The store's credentials are not in it: they stay in each node's environment."""
    env_vars = {TRUSTED_ROOTS_ENV: os.pathsep.join(trusted_roots)} if trusted_roots else {}
    if os.environ.get(STORAGE_ENV):
        env_vars[STORAGE_ENV] = os.environ[STORAGE_ENV]
    return {"env_vars": env_vars} if env_vars else None


def unreachable(address: str, error: BaseException) -> EmbinitError:
    """Why the API could not join the Ray cluster at `address`, with the two usual causes and their fixes:
    the address or its port, and Ray's token auth (seen: an API started without RAY_AUTH_MODE=token on a
    token cluster waited 30 s, then printed a traceback ending in "ray client connection timeout")."""
    mode = os.environ.get("RAY_AUTH_MODE")
    port = "the head's Ray Client port (10001 by default)" if address.startswith("ray://") else "the GCS port"
    auth = ("RAY_AUTH_MODE is unset here" if mode is None else f"RAY_AUTH_MODE={mode} here")
    return EmbinitError(f"cannot connect to the Ray cluster at {address} ({type(error).__name__}: {error}). "
                        f"Check that the address is right and that {port} is reachable from this machine; "
                        f"a cluster with token auth (docs/deployment.md) needs RAY_AUTH_MODE=token and its "
                        f"token (RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token) on the API too ({auth})")


class Runner(Protocol):
    def start(self, exp_id: str, spec: dict[str, Any], tracking_uri: str, trial_keys: list[str],
              store_uri: str | None = None) -> str:
        """Start a driver; returns its name (stored with the experiment). `store_uri`: the database behind
        the tracking server, which the trials write their runs to directly (None: through the server)."""

    def poll(self, driver: str) -> DriverState | None:
        """The driver's state, None when no such driver exists any more; TimeoutError when it exists
        but does not answer now (not scheduled yet, or busy), or may exist (a lookup missed it once): the
        caller keeps what it knew."""

    def cancel(self, driver: str) -> None:
        """Ask the driver to stop its trials (finished results stay)."""

    def release(self, driver: str) -> None:
        """Remove a driver whose final state was recorded."""

    # Optional: `cluster_id() -> str`, the identity of the Ray cluster drivers start in (`local:HOST:PID:SESSION`
    # for a local Ray the API started, `ray:ADDRESS:SESSION` for an existing cluster), kept with each
    # experiment so a reconciler judges only its own drivers (service.state).


def driver_name(exp_id: str) -> str:
    return f"embinit-exp-{exp_id}"


# Drivers run on the head node (the resource Ray gives the head alone; Ray Train pins its state actor so):
# left to Ray, a driver needing no CPU landed on any node, and a worker lost with its machine took the
# experiment with it (tests/test_cluster_netns.py). On a local Ray the head is the API's own node.
ON_THE_HEAD = {"node:__internal_head__": 0.001}


class RayOwner:
    """The thread that starts (and stops) a local Ray, alive for as long as the process.

    Ray starts its GCS and raylet with `PR_SET_PDEATHSIG=SIGKILL`, which fires when the *thread* that
    created them exits. A worker thread of a pool (AnyIO retires idle ones after 10 s) would take the
    local cluster down with it, so `ray.init` and `ray.shutdown` run here, on one thread that only ends
    after `ray.shutdown`."""

    def __init__(self):
        self._calls: queue.Queue[tuple[Callable[[], Any], Future] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="embinit-ray-owner")
        self._thread.start()

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            fn, future = item
            try:
                future.set_result(fn())
            except BaseException as e:
                future.set_exception(e)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the owner thread and return its result (or raise its exception)."""
        if threading.current_thread() is self._thread:
            return fn()
        future: Future = Future()
        self._calls.put((fn, future))
        return future.result()

    @property
    def ident(self) -> int | None:
        return self._thread.ident


class RayRunner:
    """`Runner` on a Ray cluster: a local one started in this process, or an existing one by address."""

    def __init__(self, address: str | None = None, namespace: str = "embinit", node_ip: str | None = None,
                 poll_timeout_s: float = 2.0, trusted_roots: list[str] | None = None,
                 start_grace_s: float = 30.0, register_wait_s: float = 5.0, gone_confirm_s: float = 10.0):
        self.address, self.namespace, self.node_ip = address, namespace, node_ip
        self.poll_timeout_s = poll_timeout_s
        # Ray Client creates an actor asynchronously: for a moment after `start` its name may not be
        # known yet. A driver this runner started less than `start_grace_s` ago that Ray does not know is
        # "not there yet" (TimeoutError), never "gone" (None): judged gone, a just-submitted experiment
        # was failed 90 ms after its creation while its trials went on (tests/test_cluster_netns.py).
        self.start_grace_s, self.register_wait_s = start_grace_s, register_wait_s
        # "Gone" is a verdict nothing undoes (the experiment fails, its running MLflow runs are closed), so
        # one lookup that misses (a Ray Client connection just made, a proxier in trouble) is not enough:
        # a driver is gone once Ray has not known it on lookups `gone_confirm_s` apart, or says it died.
        self.gone_confirm_s = gone_confirm_s
        self._started: dict[str, float] = {}
        self._missed: dict[str, float] = {}   # driver -> when a lookup first missed it (since last seen)
        self.trusted_roots = [os.path.realpath(r) for r in trusted_roots or []]
        self._lock = threading.Lock()
        self.owner = RayOwner()
        self.reaper = None  # service.ray_reaper, for a local Ray

    def describe(self) -> str:
        return f"ray at {self.address}" if self.address else "local ray (started by the API)"

    def cluster_id(self) -> str:
        """This runner's Ray cluster: a local one is named by its API's host and process, since it lives
        and dies with it; a Ray session name is new at every start of a cluster."""
        import socket

        import ray

        self.connect()
        try:
            session = ray.get_runtime_context().get_session_name()
        except Exception:  # Ray Client may not say: the address alone names the cluster
            session = "?"
        if self.address:
            return f"ray:{self.address}:{session}"
        return f"local:{socket.gethostname()}:{os.getpid()}:{session}"

    def connect(self) -> None:
        import ray

        if ray.is_initialized():
            return
        with self._lock:
            self.owner.call(self._init)

    def _init(self) -> None:
        import ray

        if ray.is_initialized():
            return
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        kwargs: dict[str, Any] = {"namespace": self.namespace, "log_to_driver": False}
        if self.address is not None:
            if self.node_ip and not self.address.startswith("ray://"):
                kwargs["_node_ip_address"] = self.node_ip
            try:
                ray.init(address=self.address, **kwargs)
            except Exception as e:  # Ray says only "ray client connection timeout", also for a token missing
                raise unreachable(self.address, e) from e
            return
        from embinit.sweep.ray_runtime import local_ray_options
        from service import ray_reaper

        if self.reaper is None:  # a local Ray goes when this process goes: marked before it starts
            self.reaper = ray_reaper.start()
        with local_ray_options() as local:  # a local Ray: every listener on the loopback
            ray.init(address="local", **kwargs, **local)   # never a `ray start` cluster this machine runs

    def _actor(self, driver: str):
        import ray

        self.connect()
        try:
            return ray.get_actor(driver, namespace=self.namespace)
        except ValueError:
            return None

    def start(self, exp_id: str, spec: dict[str, Any], tracking_uri: str, trial_keys: list[str],
              store_uri: str | None = None) -> str:
        import ray

        self.connect()
        name = driver_name(exp_id)
        actor_cls = ray.remote(ExperimentDriver)
        env = driver_env(self.trusted_roots)
        actor_cls.options(name=name, namespace=self.namespace, lifetime="detached", num_cpus=0,
                          resources=ON_THE_HEAD, max_concurrency=4, get_if_exists=True, runtime_env=env).remote(
            name, spec, tracking_uri, trial_keys, store_uri)
        self._started[name] = time.monotonic()
        self._await_registered(name)
        return name

    def _await_registered(self, driver: str) -> None:
        """Wait (at most `register_wait_s`) until Ray knows the driver by name, so the first poll finds
        it; one still unknown after that is covered by the start grace in `poll`."""
        deadline = time.monotonic() + self.register_wait_s
        while self._actor(driver) is None and time.monotonic() < deadline:
            time.sleep(0.05)

    def _just_started(self, driver: str) -> bool:
        started = self._started.get(driver)
        return started is not None and time.monotonic() - started < self.start_grace_s

    def poll(self, driver: str) -> DriverState | None:
        import ray

        actor = self._actor(driver)
        if actor is None:
            if self._just_started(driver):
                raise TimeoutError(f"driver {driver} was started {self.start_grace_s:g} s ago at most and "
                                   "Ray does not know it yet")
            missed = self._missed.setdefault(driver, time.monotonic())
            if time.monotonic() - missed < self.gone_confirm_s:
                raise TimeoutError(f"Ray does not know driver {driver}; it is gone if Ray still does not know "
                                   f"it {self.gone_confirm_s:g} s after the first miss")
            del self._missed[driver]   # the verdict: nothing is kept of a gone driver
            return None
        self._missed.pop(driver, None)
        try:
            return DriverState(**ray.get(actor.poll.remote(), timeout=self.poll_timeout_s))
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"driver {driver} did not answer within {self.poll_timeout_s} s") from None
        except (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError):
            return None

    def nodes(self) -> list[dict[str, float]]:
        """Each live node's total resources (CPU, GPU, ...)."""
        import ray

        self.connect()
        return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]

    def cancel(self, driver: str) -> None:
        actor = self._actor(driver)
        if actor is not None:
            actor.cancel.remote()

    def kill(self, driver: str) -> None:
        import ray

        self._started.pop(driver, None)   # nothing is kept of a driver once it is removed
        self._missed.pop(driver, None)
        actor = self._actor(driver)
        if actor is not None:
            ray.kill(actor, no_restart=True)

    release = kill

    def shutdown(self) -> None:
        import ray

        if ray.is_initialized():
            self.owner.call(ray.shutdown)
