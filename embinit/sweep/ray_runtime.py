"""Ray for a sweep: an existing connection, the cluster at an address, or a local Ray started (and
stopped) for the purpose, listening on the loopback only, with token auth disabled and usage stats off."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress

from embinit.errors import EmbinitError
from embinit.sweep.exits import how_ended
from embinit.tracking.mlflow_store import telemetry_off


LOOPBACK = "127.0.0.1"
NO_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"   # Ray's switch for its no-cluster (loopback) mode
# Set while a local Ray that a RayRuntime started runs, cleared before it is shut down on purpose.
_LOCAL_RUNNING = threading.Event()


@contextmanager
def local_ray_options() -> Iterator[dict]:
    """While a Ray for this machine alone starts (`with local_ray_options() as kw: ray.init(**kw)`): the
    `ray.init` keywords that make its node address the loopback, so the GCS, the raylet, the workers and
    the agents listen on 127.0.0.1 only, with no dashboard. Ray otherwise replaces a loopback node
    address by the machine's network one and binds its gRPC servers to every interface; its "no
    cluster" mode (meant for laptops) keeps the loopback. The processes started meanwhile keep that
    mode; this process gets its own setting back afterwards (it may join a cluster later). Token auth
    can then stay off: nothing off this machine reaches that Ray."""
    from ray._private import ray_constants
    before_env, before = os.environ.get(NO_CLUSTER_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[NO_CLUSTER_ENV] = "0"             # inherited by the Ray processes started here
    ray_constants.ENABLE_RAY_CLUSTER = False     # read by ray.init in this process (set at import)
    try:
        yield {"_node_ip_address": LOOPBACK, "include_dashboard": False}
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before
        if before_env is None:
            os.environ.pop(NO_CLUSTER_ENV, None)
        else:
            os.environ[NO_CLUSTER_ENV] = before_env


@contextmanager
def keep_signal_handlers() -> Iterator[None]:
    """The SIGTERM and SIGHUP handlers the caller installed (`embinit run`'s, embinit.sweep.interrupt)
    stay in force across `ray.init`, which installs its own for SIGTERM (`sys.exit`) and, in its core
    worker, a crash handler that aborts the process with a stack dump: the sweep's MLflow runs would stay
    RUNNING. Without one of the caller's (a signal's default), Ray's stay."""
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)} if main else {}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if callable(handler):
                signal.signal(sig, handler)


def default_env(local: bool = True) -> None:
    """No usage-stats reporting, and for a local Ray (loopback only) token auth off, unless set
    otherwise; a cluster keeps the auth mode its environment gives."""
    if local:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    telemetry_off()  # nor MLflow's
    # MLflow is the record; Tune's JSON/CSV/TensorBoard loggers would only add per-result latency.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # Every epoch checkpoints, so Tune's "snapshotting too often" warning fires on short trials.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # embinit prints its own progress line; Tune's tables (new output engine) would interleave with it.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Ctrl-C is embinit's (sweep/interrupt.py): Tune's own handler would print a Tuner.restore hint,
    # while embinit resumes by running the spec again.
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")


def one_machine() -> bool:
    """Whether the connected Ray cannot span machines: one live node, and its GCS listening on a loopback
    address (a Ray started for this machine alone, `local_ray_options`), so no node of another machine
    can join it later. A cluster joined by address, or a local Ray listening on the network, may gain
    nodes: False, as when the connection cannot say (a Ray Client)."""
    import ipaddress

    import ray
    if not ray.is_initialized():   # asking the runtime context would start a Ray of its own
        return False
    try:
        host = ray.get_runtime_context().gcs_address.rsplit(":", 1)[0].strip("[]")
    except Exception:
        return False
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        loopback = host == "localhost"
    return loopback and sum(1 for n in ray.nodes() if n.get("Alive")) == 1


def local_ray_lost() -> str | None:
    """What ended the local Ray that a `RayRuntime` of this process started and is not stopping, when it
    lost its GCS or raylet: "the local Ray's raylet died (pid N, killed by SIGKILL)". A signal to the
    process group or the job kills them with the driver; the OOM killer or a crash kills them alone.
    None while they run, and for a cluster joined by address, a connection the caller owns, or no Ray."""
    if not _LOCAL_RUNNING.is_set():
        return None
    try:   # Ray's internals: a Ray without them loses this check, not the sweep
        from ray._private import ray_constants, worker
        node = worker._global_node
        vital = {ray_constants.PROCESS_TYPE_GCS_SERVER: "GCS (gcs_server)", ray_constants.PROCESS_TYPE_RAYLET: "raylet"}
        dead = [(vital[kind], p) for kind, p in (node.dead_processes() if node is not None else []) if kind in vital]
    except Exception:   # its table changed while read (Ray is being shut down), or another Ray's internals
        return None
    if not dead or not _LOCAL_RUNNING.is_set():   # cleared first when Ray is stopped on purpose
        return None
    return "; ".join(f"the local Ray's {name} died (pid {p.pid}, {how_ended(p.returncode)})" for name, p in dead)


def end_lost_local_ray() -> None:
    """After `local_ray_lost`: SIGKILL what is left of that Ray, so that no trial trains on into runs closed
    already and nothing outlives the driver that started it. After its GCS died its raylet and workers ran
    on for seconds; after its raylet died its workers (orphaned) still wrote a checkpoint, and its agents
    stayed. They are the processes the node started that still run, with their descendants, and the
    processes of this user that hold a file in the session's folder (a worker's or agent's log) open:
    a session folder is this Ray's alone."""
    import psutil
    try:
        from ray._private import worker
        node = worker._global_node
        started = [info.process for infos in node.all_processes.values() for info in infos]
        session = os.path.join(node.get_session_dir_path(), "")
    except Exception:   # Ray's internals changed: nothing is ended
        return
    doomed: dict[int, psutil.Process] = {}
    for process in started:
        if process.poll() is None:   # an ended one was reaped: its pid may be another's now
            with suppress(psutil.Error):
                top = psutil.Process(process.pid)
                doomed.update((p.pid, p) for p in [*top.children(recursive=True), top])
    for p in psutil.process_iter():
        with suppress(psutil.Error):
            if p.pid != os.getpid() and p.uids().real == os.getuid() and \
                    any(f.path.startswith(session) for f in p.open_files()):
                doomed[p.pid] = p
    for p in doomed.values():
        with suppress(psutil.Error):
            p.kill()


class RayRuntime:
    """`with RayRuntime(address, resources)`: Ray for a sweep, started here (address None) or joined.
    resources: the spec's per-trial `resources` (cpus, gpus), checked against a Ray started here."""

    def __init__(self, address: str | None = None, resources=None):
        self.address, self.resources, self.started = address, resources, False

    def __enter__(self) -> "RayRuntime":
        default_env(local=self.address is None)
        import ray
        if ray.is_initialized():
            return self  # the caller (a service driver, a test) owns the connection
        try:
            with local_ray_options() if self.address is None else nullcontext({"include_dashboard": False}) as where, \
                    keep_signal_handlers():
                ray.init(address=self.address or "local", ignore_reinit_error=True, **where,
                         log_to_driver=os.environ.get("EMBINIT_RAY_LOGS", "0") == "1",
                         logging_level=logging.WARNING)
        except ConnectionError as e:
            raise EmbinitError(f"cannot connect to the Ray cluster at {self.address!r}: {e}") from None
        self.started = True
        if self.address is None:
            _LOCAL_RUNNING.set()
        if self.resources is not None:
            try:
                self.check_fits(self.resources.cpus, self.resources.gpus)
            except EmbinitError:
                self.__exit__()           # __exit__ does not run when __enter__ raises
                raise
        return self

    def check_fits(self, cpus: float, gpus: float) -> None:
        """A Ray started here for this machine alone never grows: a trial that asks for more CPUs or GPUs
        than it has would stay pending for ever (Tune only warns, once a minute). Say so before the sweep
        starts. A cluster joined by address may still gain nodes (an autoscaler): nothing is checked."""
        if not self.started or self.address is not None:
            return
        import ray
        _raise_misfit(ray.cluster_resources(), cpus, gpus)

    def __exit__(self, *exc) -> None:
        if self.started:
            import ray
            _LOCAL_RUNNING.clear()   # its processes end now on purpose: not a loss (embinit.sweep.abandon)
            ray.shutdown()


def check_fits_machine(resources) -> None:
    """Before a Ray for this machine alone starts (and the sweep's data work with it): the misfit that
    needs no Ray to see, more CPUs per trial than this machine has (Ray never counts more, unless told to
    with RAY_OVERRIDE_RESOURCES). The rest (a cgroup's quota, GPUs) `RayRuntime.check_fits` finds once
    it is up."""
    if resources is not None and "RAY_OVERRIDE_RESOURCES" not in os.environ:
        _raise_misfit({"CPU": os.cpu_count() or 0, "GPU": float("inf")}, resources.cpus, 0)


def _raise_misfit(have: dict, cpus: float, gpus: float) -> None:
    problems = [f"resources.{name}: {want:g} per trial, but this machine's Ray has {have.get(key, 0):g}{why}"
                for name, key, want, why in (("cpus", "CPU", cpus, ""),
                                             ("gpus", "GPU", gpus, " (no CUDA device seen)"))
                if want > have.get(key, 0) + 1e-9]
    if problems:
        raise EmbinitError("the trials could never start on the local Ray: " + "; ".join(problems) +
                           ". Lower the spec's resources (on a CPU machine: gpus: 0 and device: cpu), or "
                           "run where they exist (a GPU machine, or a cluster joined with --address)")
