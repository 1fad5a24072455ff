"""The compose topology (docker-compose.yml) as processes on hosts of their own (tests/helpers/netns.py):
PostgreSQL, the MLflow tracking server on it (serving artifacts), an S3 server (moto's: the object store
of EMBINIT_STORAGE_URI), the Ray head with the API (a Ray Client of it, token auth on), two Ray workers,
and a 'client' host from which tests and people reach them. Each host has its own address on a private
/24 and its own disk; everything is removed at the end, also after a failed start.

    python -m tests.helpers.netns_cluster up      # as root: prints the API's URL, runs until Ctrl-C
    python -m tests.helpers.netns_cluster down    # removes what a killed `up` left (every eic* namespace)
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .netns import Host, Switch, destroy_prefix, ip
from .postgres import as_postgres_user, pg_bin
from .s3 import CREDENTIALS

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PREFIX = "eic"                          # every namespace of the harness starts with it
OWNER = "owner"                         # the pid of the process that made the cluster, in its folder
HOSTS = {"db": 2, "mlflow": 3, "s3": 4, "head": 5, "w1": 6, "w2": 7}
PG, MLFLOW, S3, GCS, RAY_CLIENT, API = 5432, 5000, 9000, 6379, 10001, 8000


class Cluster:
    def __init__(self, claim_ttl_s: int = 10):
        self.prefix = f"{PREFIX}{secrets.token_hex(3)}"
        self.root = Path(f"/tmp/{self.prefix}")     # short: Ray's socket paths are length-limited
        self.switch = Switch(self.prefix, self.root)
        self.token = self.root / "ray_auth_token"   # the compose secret, as a file every host reads
        self.bucket = f"embinit-{self.prefix}"
        self.claim_ttl_s = claim_ttl_s
        self.procs: dict[str, object] = {}

    # addresses -------------------------------------------------------------------------------------
    def host(self, name: str) -> Host:
        return self.switch.hosts[name]

    def addr(self, name: str) -> str:
        return f"10.213.7.{HOSTS[name]}"

    @property
    def api_url(self) -> str:
        return f"http://{self.addr('head')}:{API}"

    @property
    def tracking_uri(self) -> str:
        return f"http://{self.addr('mlflow')}:{MLFLOW}"

    @property
    def store_env(self) -> dict[str, str]:
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": f"http://{self.addr('s3')}:{S3}",
                "EMBINIT_STORAGE_URI": f"s3://{self.bucket}/embinit"}

    def env(self, **extra: str) -> dict[str, str]:
        """Every host's environment: the shared code and venv, a private home and cache, Ray's token."""
        disk = self.switch.root / "disk"
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "EMBINIT_", "AWS_"))}
        return {**keep, "PATH": f"{BIN}:{keep.get('PATH', '/usr/bin:/bin')}", "PYTHONPATH": str(REPO),
                "HOME": f"{disk}/home", "EMBINIT_CACHE_DIR": f"{disk}/cache", "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN_PATH": str(self.token), "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "EMBINIT_CLAIM_TTL_S": str(self.claim_ttl_s),
                **self.store_env, **extra}

    # the client host -------------------------------------------------------------------------------
    def call(self, fn, *args, **kwargs):
        """Run `fn` on the client host (a thread of this process in its network namespace)."""
        return self.switch.client().submit(fn, *args, **kwargs).result()

    def wait_port(self, name: str, port: int, timeout: float = 120, proc=None) -> None:
        """Until `name:port` accepts connections; with `proc`, fails at once when that process ends. The
        error carries the tail of the logs (they go with the cluster's folder at teardown)."""
        def probe() -> None:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    socket.create_connection((self.addr(name), port), timeout=1).close()
                    return
                except OSError:
                    if proc is not None and proc.poll() is not None:
                        raise RuntimeError(f"{name}:{port}: its process exited ({proc.returncode}) before "
                                           f"opening it\n{self.log_tails()}") from None
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{name}:{port} did not open in {timeout} s\n"
                                           f"{self.log_tails()}") from None
                    time.sleep(0.2)
        self.call(probe)

    def log_tails(self, lines: int = 25) -> str:
        out = []
        for log in sorted((self.root / "logs").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(out)

    # services --------------------------------------------------------------------------------------
    def start_postgres(self) -> None:
        pg, db = pg_bin(), self.host("db")
        data = f"{db.disk}/pg"
        db.run(["sh", "-c", f"mkdir -p {data} && chown postgres:postgres {data}"], self.env())
        initdb = [str(pg / "initdb"), "-D", f"{data}/db", "-U", "embinit", "--auth=trust", "-E", "UTF8"]
        db.run(as_postgres_user(initdb), self.env())
        db.run(["sh", "-c", f"echo 'host all all 10.213.7.0/24 trust' >> {data}/db/pg_hba.conf"], self.env())
        self.procs["postgres"] = db.start(as_postgres_user([str(pg / "postgres"), "-D", f"{data}/db", "-h", db.addr,
                                                            "-p", str(PG), "-k", data, "-F"]), self.env(), "postgres")
        for _ in range(200):
            if db.run_quiet([str(pg / "pg_isready"), "-h", db.addr, "-p", str(PG)]) == 0:
                break
            time.sleep(0.1)
        for name in ("mlflow", "embinit"):
            db.run([str(pg / "psql"), "-h", db.addr, "-p", str(PG), "-U", "embinit", "-d", "postgres",
                    "-c", f"CREATE DATABASE {name}"], self.env())

    def pg_url(self, db: str) -> str:
        return f"postgresql+psycopg://embinit@{self.addr('db')}:{PG}/{db}"

    def start_mlflow(self) -> None:
        host = self.host("mlflow")
        self.procs["mlflow"] = host.start(
            [str(BIN / "mlflow"), "server", "--host", host.addr, "--port", str(MLFLOW), "--workers", "1",
             "--serve-artifacts", "--artifacts-destination", f"{host.disk}/mlartifacts",
             "--allowed-hosts", f"{host.addr},{host.addr}:{MLFLOW}"],
            # the store in the environment, as docker-compose.yml gives it (no password on a command line)
            self.env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_BACKEND_STORE_URI=self.pg_url("mlflow")),
            "mlflow")

    def start_s3(self) -> None:
        host = self.host("s3")
        self.procs["s3"] = host.start([str(BIN / "moto_server"), "-H", host.addr, "-p", str(S3)], self.env(), "s3")

    def make_bucket(self) -> None:
        import boto3

        def make() -> None:
            boto3.client("s3", endpoint_url=self.store_env["AWS_ENDPOINT_URL"],
                         aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                         aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                         region_name=CREDENTIALS["AWS_DEFAULT_REGION"]).create_bucket(Bucket=self.bucket)
        self.call(make)

    def start_ray(self, name: str) -> None:
        """The head (no CPUs for trials, as in compose) or a worker with one CPU."""
        host = self.host(name)
        common = ["--num-gpus=0", "--disable-usage-stats", f"--temp-dir={host.disk}/ray",
                  f"--node-ip-address={host.addr}"]
        if name == "head":
            cmd = ["--head", f"--port={GCS}", f"--ray-client-server-port={RAY_CLIENT}", "--num-cpus=0",
                   "--include-dashboard=false"]
        else:
            cmd = [f"--address={self.addr('head')}:{GCS}", "--num-cpus=1"]
        host.run([str(BIN / "ray"), "start", *cmd, *common], self.env())

    def start_api(self) -> None:
        host = self.host("head")
        env = self.env(EMBINIT_DATABASE_URL=self.pg_url("embinit"), EMBINIT_TRACKING_URI=self.tracking_uri,
                       EMBINIT_TRACKING_READ_URI=self.pg_url("mlflow"),   # as docker-compose.yml sets them
                       EMBINIT_TRACKING_WRITE_DIRECT="true",
                       EMBINIT_RAY_ADDRESS=f"ray://{host.addr}:{RAY_CLIENT}",
                       EMBINIT_DATA_ROOTS=f'["{host.disk}/data"]', EMBINIT_PRETRAINED_ROOTS=f'["{host.disk}/data"]',
                       EMBINIT_REFRESH_INTERVAL_S="0.5", EMBINIT_MONITOR_INTERVAL_S="2",
                       EMBINIT_MLFLOW_UI_URL=self.tracking_uri, MLFLOW_HTTP_REQUEST_MAX_RETRIES="2",
                       MLFLOW_HTTP_REQUEST_TIMEOUT="10")
        self.wait_port("head", RAY_CLIENT, timeout=180)   # the API connects to it as a Ray Client
        for attempt in (1, 2):   # as compose's restart policy would: a start that failed is retried once
            self.procs["api"] = host.start([str(BIN / "embinit"), "serve", "--host", host.addr,
                                            "--port", str(API)], env, "api")
            try:
                self.wait_port("head", API, timeout=180 if attempt == 2 else 120, proc=self.procs["api"])
                return
            except (TimeoutError, RuntimeError) as e:
                if attempt == 2:
                    raise
                api_log = (self.root / "logs" / "head-api.log").read_text(errors="replace").splitlines()[-40:]
                print(f"the API did not start ({str(e).splitlines()[0][:300]}); starting it again. Its log:\n"
                      + "\n".join(api_log), file=sys.stderr)
                self.kill("api")

    def revive(self, name: str) -> None:
        """A worker's machine starts again, with an empty disk, and joins the head."""
        host = self.host(name)
        host.kill()
        host.boot()
        self.start_ray(name)

    def kill(self, name: str) -> None:
        """Kill one started process (SIGKILL, its whole process group)."""
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    # the whole -------------------------------------------------------------------------------------
    def up(self) -> "Cluster":
        for gone in remove_orphans():
            print(f"removed the cluster {gone} a killed run left behind", flush=True)
        atexit.register(self.down)
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def _up(self) -> None:
        (self.root / "disk").mkdir(parents=True)
        (self.root / OWNER).write_text(str(os.getpid()))
        (self.root / "logs").mkdir()
        # readable by its owner alone from its creation, and never written into a file already there (as
        # helpers.ray_cluster.write_token): whoever reads it joins the cluster and runs code on every host
        fd = os.open(self.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        self.switch.create()
        for name, number in HOSTS.items():
            self.switch.add(name, number)
        self.switch.client()   # made once, here: the start-up threads below all probe from it
        with ThreadPoolExecutor(4) as pool:
            pending = [pool.submit(self.start_postgres), pool.submit(self.start_s3),
                       pool.submit(self.start_ray, "head")]
            for job in pending:
                job.result()
            self.start_mlflow()
            # the API (which needs the head and MLflow) starts while the workers join, as compose's do
            pending = [pool.submit(self.make_bucket_when_up), pool.submit(self.start_api_when_mlflow_up),
                       *(pool.submit(self.start_ray, w) for w in ("w1", "w2"))]
            for job in pending:
                job.result()

    def start_api_when_mlflow_up(self) -> None:
        self.wait_port("mlflow", MLFLOW, timeout=180)
        self.start_api()

    def make_bucket_when_up(self) -> None:
        self.wait_port("s3", S3)
        self.make_bucket()

    def down(self) -> None:
        atexit.unregister(self.down)
        self.switch.destroy()
        shutil.rmtree(self.root, ignore_errors=True)

    def describe(self) -> str:
        client = self.switch.hosts["client"].ns if "client" in self.switch.hosts else f"{self.prefix}-client"
        lines = [f"API          {self.api_url}   (docs at /docs)", f"MLflow       {self.tracking_uri}",
                 f"PostgreSQL   {self.pg_url('embinit')}", f"S3 store     {self.store_env['AWS_ENDPOINT_URL']}"
                 f" ({self.store_env['EMBINIT_STORAGE_URI']})",
                 f"Ray          ray://{self.addr('head')}:{RAY_CLIENT} (token: {self.token})",
                 f"logs         {self.root / 'logs'}", "",
                 "The addresses exist only inside the cluster's namespaces; reach them from the client host:",
                 f"  ip netns exec {client} curl {self.api_url}/health",
                 f"  ip netns exec {client} {BIN / 'embinit'} experiments list --url {self.api_url}",
                 f"  ip netns exec {client} bash      # a shell on the client host"]
        return "\n".join(lines)


def remove_orphans(grace_s: float = 120) -> list[str]:
    """Remove the clusters whose owner process is gone: a test run killed by a signal (CI's timeout,
    Ctrl-C twice) runs neither its fixture's teardown nor `atexit`, and its servers would go on using the
    CPU of every later run. A cluster whose owner is not yet written is left alone for `grace_s`."""
    pattern = re.compile(f"^({PREFIX}[0-9a-f]{{6}})-")
    prefixes = {m.group(1) for line in ip("netns", "list", check=False).stdout.splitlines()
                if (m := pattern.match(line))}
    prefixes |= {p.name for p in Path("/tmp").glob(PREFIX + "[0-9a-f]" * 6)}
    gone = [p for p in sorted(prefixes) if _orphaned(Path("/tmp") / p, grace_s)]
    for prefix in gone:
        destroy_prefix(prefix)
        shutil.rmtree(Path("/tmp") / prefix, ignore_errors=True)
    return gone


def _orphaned(root: Path, grace_s: float) -> bool:
    try:
        pid = int((root / OWNER).read_text())
    except (OSError, ValueError):
        try:
            return time.time() - root.stat().st_mtime > grace_s
        except OSError:
            return True   # namespaces without their folder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def main(argv: list[str]) -> int:
    if argv[:1] == ["down"]:
        destroy_prefix(f"{PREFIX}[0-9a-f]{{6}}")
        for leftover in Path("/tmp").glob(f"{PREFIX}" + "[0-9a-f]" * 6):
            shutil.rmtree(leftover, ignore_errors=True)
        return 0
    if argv[:1] != ["up"]:
        print(__doc__)
        return 2
    def stop(*_args) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    started = time.monotonic()
    cluster = Cluster().up()
    cluster.switch.client()
    print(f"cluster {cluster.prefix} up in {time.monotonic() - started:.0f} s\n{cluster.describe()}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = ["Cluster", "ip"]
