"""Hosts made of Linux namespaces: each host is a network namespace with its own address on a private
/24 (a bridge that lives in a 'switch' namespace of its own, so the machine's own network namespace gets
no new address or link) and a private disk (a tmpfs in a mount namespace of its own, mounted at the same
path on every host) and hostname (a UTS namespace). The code and the virtual environment stay on the
machine's shared disk.

A host is kept alive by a keeper process (`sleep`) that holds its mount namespace; every process of the
host is started in the keeper's namespaces with `nsenter`. Killing a host kills every process in its
network namespace, the keeper included, so its disk goes with it. Needs root and `ip`, `unshare`,
`nsenter` (util-linux, iproute2)."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SUBNET = "10.213.7"           # the /24 exists only inside the namespaces made here
CLONE_NEWNET = 0x40000000


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done


def namespace_pids(ns: str) -> list[int]:
    done = ip("netns", "pids", ns, check=False)
    return [int(p) for p in done.stdout.split()]


def kill_namespace(ns: str) -> None:
    """SIGKILL every process whose network namespace is `ns`, until none is left."""
    for _ in range(50):
        pids = namespace_pids(ns)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


class Host:
    """One machine: `ns` (its network namespace), `addr` on the switch, `disk` (a private tmpfs)."""

    def __init__(self, switch: "Switch", name: str, number: int, disk: Path, logs: Path):
        self.switch, self.name, self.addr = switch, name, f"{SUBNET}.{number}"
        self.ns, self.port = f"{switch.prefix}-{name}", f"v-{name}"   # port: its cable's end on the switch
        self.disk, self.logs = disk, logs
        self.keeper: subprocess.Popen | None = None

    def create(self) -> None:
        sw = self.switch.ns
        ip("netns", "add", self.ns)
        ip("link", "add", self.port, "type", "veth", "peer", "name", "eth0", "netns", self.ns, ns=sw)
        ip("link", "set", self.port, "master", "br0", "up", ns=sw)
        ip("addr", "add", f"{self.addr}/24", "dev", "eth0", ns=self.ns)
        ip("link", "set", "eth0", "up", ns=self.ns)
        ip("link", "set", "lo", "up", ns=self.ns)     # Ray talks to itself on the loopback too
        self.boot()

    def boot(self) -> None:
        """Start the keeper: a mount namespace of its own with a fresh tmpfs at `disk`, and a hostname of
        its own (a UTS namespace: embinit tells hosts apart by name, e.g. in a claim's holder `host:pid`)."""
        script = (f"hostname {self.ns} && mount -t tmpfs -o mode=1777,size=2g tmpfs {self.disk} && "
                  f"mkdir -p {self.disk}/data {self.disk}/cache {self.disk}/home && touch {self.disk}/.up && "
                  "exec sleep infinity")
        self.keeper = subprocess.Popen(["ip", "netns", "exec", self.ns, "unshare", "--mount", "--uts",
                                        "--propagation", "private", "sh", "-c", script],
                                       start_new_session=True, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if self.run_quiet(["test", "-e", f"{self.disk}/.up"]) == 0:
                return
            time.sleep(0.05)
        raise RuntimeError(f"host {self.name}: its disk was not mounted")

    def command(self, cmd: list[str]) -> list[str]:
        assert self.keeper is not None, f"host {self.name} is not up"
        return ["nsenter", "-t", str(self.keeper.pid), "-n", "-m", "-u", "--", *cmd]

    def run_quiet(self, cmd: list[str]) -> int:
        return subprocess.run(self.command(cmd), capture_output=True, timeout=30).returncode

    def run(self, cmd: list[str], env: dict[str, str], timeout: float = 240) -> str:
        """Run `cmd` on this host to its end; its output, or RuntimeError with it."""
        done = subprocess.run(self.command(cmd), env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode:
            raise RuntimeError(f"{self.name}: {' '.join(cmd)} exited {done.returncode}:\n"
                               f"{(done.stdout + done.stderr)[-3000:]}")
        return done.stdout

    def start(self, cmd: list[str], env: dict[str, str], log: str) -> subprocess.Popen:
        """Start a long-running process on this host, its output in `logs/<log>.log`."""
        out = open(self.logs / f"{self.name}-{log}.log", "ab")
        try:
            return subprocess.Popen(self.command(cmd), env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            out.close()

    def kill(self) -> None:
        """The machine dies: every process on it, and with the keeper its disk."""
        kill_namespace(self.ns)
        if self.keeper is not None:
            self.keeper.wait(timeout=10)
        self.keeper = None

    def link(self, up: bool) -> None:
        """Plug its cable into the switch, or pull it out."""
        ip("link", "set", self.port, "up" if up else "down", ns=self.switch.ns)


class Switch:
    """A bridge in a namespace of its own, and the hosts plugged into it; `prefix` names them all."""

    def __init__(self, prefix: str, root: Path):
        self.prefix, self.ns, self.root = prefix, f"{prefix}-sw", root
        self.hosts: dict[str, Host] = {}
        self._client: ThreadPoolExecutor | None = None

    def create(self) -> None:
        ip("netns", "add", self.ns)
        ip("link", "add", "br0", "type", "bridge", ns=self.ns)
        ip("link", "set", "br0", "up", ns=self.ns)

    def add(self, name: str, number: int) -> Host:
        host = Host(self, name, number, self.root / "disk", self.root / "logs")
        self.hosts[name] = host
        host.create()
        return host

    def client(self) -> ThreadPoolExecutor:
        """One thread of this process inside the 'client' host's network namespace (network namespaces
        are per thread): whatever is submitted to it talks to the hosts as a machine on the /24 would."""
        if self._client is None:
            client = self.add("client", 200)

            def enter() -> None:
                fd = os.open(f"/var/run/netns/{client.ns}", os.O_RDONLY)
                try:
                    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns")
                finally:
                    os.close(fd)
            self._client = ThreadPoolExecutor(1, thread_name_prefix=f"{self.prefix}-client", initializer=enter)
        return self._client

    def destroy(self) -> None:
        """Kill every process in every namespace of this prefix and delete the namespaces."""
        if self._client is not None:
            self._client.shutdown(wait=False, cancel_futures=True)
        destroy_prefix(self.prefix)


def destroy_prefix(prefix: str) -> None:
    """Every namespace named `<prefix>-...` (`prefix` a regular expression), its processes first."""
    names = [line.split()[0] for line in ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    for ns in names:
        if re.match(f"{prefix}-", ns):
            kill_namespace(ns)
            ip("netns", "del", ns, check=False)


def namespaces_usable() -> str | None:
    """None when this process can make network and mount namespaces, else why not."""
    if os.geteuid() != 0:
        return "the cluster harness needs root (network namespaces, tmpfs mounts)"
    probe = f"eicprobe{os.getpid()}"
    try:
        ip("netns", "add", probe)
        done = subprocess.run(["ip", "netns", "exec", probe, "unshare", "--mount", "--propagation", "private",
                               "mount", "-t", "tmpfs", "tmpfs", "/mnt"], capture_output=True, text=True,
                              timeout=30)
        if done.returncode:
            return f"the cluster harness cannot mount a private tmpfs: {done.stderr.strip()}"
    except (RuntimeError, FileNotFoundError, subprocess.TimeoutExpired) as e:
        return f"the cluster harness cannot make network namespaces: {e}"
    finally:
        ip("netns", "del", probe, check=False)
    return None
