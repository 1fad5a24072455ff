"""The control plane at scale: N no-work trials (`execution.trainer: noop`) through the service, on
SQLite (state database + mlflow.db) or on PostgreSQL with an `mlflow server` in front of its store (the
API reads the database behind it, `EMBINIT_TRACKING_READ_URI`, and the trials write their runs to it,
`EMBINIT_TRACKING_WRITE_DIRECT`, their artifacts through the server, as docker-compose.yml sets it;
`--trial-writes server`: everything through the server; `embinit report` is given the database URL).

    python bench/bench_control_plane.py --store sqlite --trials 1000 [--trials-per-unit 1]
    python bench/bench_control_plane.py --store postgres --trials 1000 10000 [--trial-writes database|server]
        [--mlflow-workers 1] [--mlflow-gunicorn]

Per (store, N) it measures: the submission's wall time and control-plane ms per trial (nothing trains,
so all of it is scheduling, claims, dedup and MLflow writes), trials recorded per second, MLflow values
(runs, metrics, params, tags) and write transactions (PostgreSQL) per second, the p50/p99 of the API's
reads (status, /trials, /results) polled from a thread during the sweep, the driver actor's peak RSS,
and at the end the time of `GET .../results?baseline=Xavier` (builds the report), of a plain one (the
report stored when the experiment finished) and of `embinit report`. Each case carries the machine's
load (1-minute average) at its start and end.
Results go to bench/results/bench_control_plane.json (one entry per case, appended).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = ["synthetic_classification", "synthetic_translation"]
INITS = ["xavier", "normal"]
PG_USER = "embinit"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spec_body(n: int, per_unit: int) -> dict:
    """N trials: 2 tasks x 2 inits x N/4 seeds, the noop trainer, a quarter CPU each (8 at once on 2 cores)."""
    execution = {"trainer": "noop", **({"trials_per_unit": per_unit} if per_unit > 1 else {})}
    return {"name": f"scale-{n}", "tasks": TASKS, "inits": INITS, "seeds": n // (len(TASKS) * len(INITS)),
            "resources": {"cpus": 0.25}, "execution": execution}   # retries: the default (2)


class Postgres:
    """A throwaway PostgreSQL server (as tests/test_service_fuzz.py starts one) with two databases."""

    def __init__(self, work: Path):
        self.data, self.port = Path(tempfile.mkdtemp(prefix="embinit-pg-")), free_port()  # postgres reads it
        root = os.geteuid() == 0
        if root:
            shutil.chown(self.data, "postgres", "postgres")
        self.prefix = ["runuser", "-u", "postgres", "--"] if root else []
        self._run("initdb", "-D", str(self.data / "db"), "-U", PG_USER, "--auth=trust", "-E", "UTF8")
        self._run("pg_ctl", "-D", str(self.data / "db"), "-l", str(self.data / "log"), "-w", "start",
                  "-o", f"-h 127.0.0.1 -p {self.port} -k {self.data} -c max_connections=300")
        from sqlalchemy import create_engine, text
        engine = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            for db in ("state", "mlflow"):
                conn.execute(text(f"create database {db}"))
        engine.dispose()

    def _run(self, *cmd: str) -> None:
        subprocess.run([*self.prefix, *cmd], check=True, capture_output=True, timeout=120)

    def url(self, db: str) -> str:
        return f"postgresql+psycopg://{PG_USER}@127.0.0.1:{self.port}/{db}"

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data / "db"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.data, ignore_errors=True)


def wait_http(url: str, proc: subprocess.Popen, what: str, timeout: float = 180) -> None:
    import httpx
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not answer at {url} in {timeout} s")


def start_mlflow_server(work: Path, backend: str, workers: int = 1,
                        gunicorn: bool = False) -> tuple[str, subprocess.Popen]:
    """`mlflow server` as docker-compose.yml runs it: one worker, the job runner off. `workers` > 1 is
    MLflow's own default (4): uvicorn's multi-process mode then leaves Nagle on for accepted sockets
    (Kludex/uvicorn#3149), so every call on a kept-alive connection after the first waits ~40 ms.
    `gunicorn`: MLflow's Flask app under gunicorn's sync workers instead (MLflow discourages it)."""
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
                             "--artifacts-destination", str(work / "mlartifacts"), "--host", "127.0.0.1",
                             "--port", str(port), "--workers", str(workers),
                             *(["--gunicorn-opts", "--timeout 120"] if gunicorn else [])], env=env,
                            cwd=work, stdout=open(work / "mlflow.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)   # its own group: stop_group stops its workers too
    wait_http(f"http://127.0.0.1:{port}/health", proc, "mlflow server")
    return f"http://127.0.0.1:{port}", proc


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a process started in a session of its own, and everything it started."""
    import signal
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def start_api(work: Path, database_url: str, tracking_uri: str, n: int,
              read_uri: str | None = None, write_direct: bool = False) -> tuple[str, subprocess.Popen]:
    port = free_port()
    env = {**os.environ, "EMBINIT_DATABASE_URL": database_url, "EMBINIT_TRACKING_URI": tracking_uri,
           **({"EMBINIT_TRACKING_READ_URI": read_uri} if read_uri else {}),   # as docker-compose.yml sets it
           "EMBINIT_TRACKING_WRITE_DIRECT": str(write_direct).lower(),
           # the documented settings: one experiment of n trials (default cap 2,000)
           "EMBINIT_MAX_TRIALS_PER_EXPERIMENT": str(max(n, 2000)), "EMBINIT_DATA_ROOTS": json.dumps([str(work)]),
           "EMBINIT_PRETRAINED_ROOTS": json.dumps([str(work)]), "EMBINIT_CACHE_DIR": str(work / "cache"),
           "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "embinit", "serve", "--port", str(port), "--log-level", "warning"],
                            cwd=work, env=env, stdout=open(work / "api.log", "w"), stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/health", proc, "embinit serve")
    return f"http://127.0.0.1:{port}", proc


class Reader(threading.Thread):
    """Polls the experiment's reads while it runs, recording each one's latency (ms) by endpoint, and the
    status counts over time."""

    def __init__(self, base: str, exp_id: str):
        super().__init__(daemon=True)
        self.base, self.exp_id, self.stop = base, exp_id, threading.Event()
        self.latency: dict[str, list[float]] = {"status": [], "trials": [], "results": []}
        self.timeline: list[tuple[float, str, dict]] = []
        self.errors = 0

    def run(self) -> None:
        import httpx
        paths = {"status": "", "trials": "/trials?limit=200", "results": "/results"}
        with httpx.Client(base_url=self.base, timeout=120) as c:
            while not self.stop.is_set():
                for name, tail in paths.items():
                    t = time.perf_counter()
                    r = c.get(f"/experiments/{self.exp_id}{tail}")
                    self.latency[name].append((time.perf_counter() - t) * 1000)
                    self.errors += r.status_code >= 500
                    if name == "status" and r.status_code == 200:
                        body = r.json()
                        self.timeline.append((time.time(), body["status"], body["counts"]))
                self.stop.wait(0.5)


class RssSampler(threading.Thread):
    """Peak and last RSS (MiB) of the experiment's driver actor (a Ray worker process) and of the API."""

    def __init__(self, api_pid: int):
        super().__init__(daemon=True)
        self.api_pid, self.stop = api_pid, threading.Event()
        self.driver_peak = self.api_peak = 0.0
        self.driver_samples: list[tuple[float, float]] = []

    def _driver(self):
        import psutil
        for p in psutil.process_iter(["cmdline"]):
            if "ExperimentDriver" in " ".join(p.info["cmdline"] or []):
                return p
        return None

    def run(self) -> None:
        import psutil
        driver, api = None, psutil.Process(self.api_pid)
        while not self.stop.is_set():
            try:
                driver = driver if driver is not None and driver.is_running() else self._driver()
                if driver is not None:
                    rss = driver.memory_info().rss / 2**20
                    self.driver_peak = max(self.driver_peak, rss)
                    self.driver_samples.append((time.time(), rss))
                self.api_peak = max(self.api_peak, api.memory_info().rss / 2**20)
            except psutil.Error:
                driver = None
            self.stop.wait(1.0)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))], 1)


def store_rows(backend: str) -> dict[str, int]:
    """Rows the sweep left in the MLflow store (runs, metric values, params, tags)."""
    from sqlalchemy import create_engine, text
    engine = create_engine(backend)
    with engine.connect() as conn:
        out = {t: conn.execute(text(f"select count(*) from {t}")).scalar()
               for t in ("runs", "metrics", "params", "tags")}
    engine.dispose()
    return out


def failures(backend: str) -> list[str]:
    """The first lines of the failed trial runs' errors (what lost trials, when some were)."""
    from sqlalchemy import create_engine, text
    engine = create_engine(backend)
    with engine.connect() as conn:
        rows = conn.execute(text("select value from tags where key = 'embinit.error' limit 5")).scalars().all()
    engine.dispose()
    return [(r or "")[-400:] for r in rows]


def pg_commits(pg: Postgres | None) -> int | None:
    if pg is None:
        return None
    from sqlalchemy import create_engine, text
    engine = create_engine(pg.url("postgres"))
    with engine.connect() as conn:
        n = conn.execute(text("select xact_commit from pg_stat_database where datname = 'mlflow'")).scalar()
    engine.dispose()
    return int(n)


def run_case(store: str, n: int, per_unit: int, timeout_s: float, mlflow_workers: int = 1,
             gunicorn: bool = False, trial_writes: str = "database") -> dict:
    import httpx
    work = Path(tempfile.mkdtemp(prefix=f"embinit-scale-{store}-{n}-"))
    pg = Postgres(work) if store == "postgres" else None
    procs: list[subprocess.Popen] = []
    mlflow_proc = None
    try:
        if pg is not None:
            backend = pg.url("mlflow")
            tracking_uri, mlflow_proc = start_mlflow_server(work, backend, mlflow_workers, gunicorn)
            procs.append(mlflow_proc)
            database_url = pg.url("state")
        else:
            backend = f"sqlite:///{work}/mlflow.db"
            tracking_uri, database_url = backend, f"sqlite:///{work}/state.db"
        direct = pg is not None and trial_writes == "database"
        base, api = start_api(work, database_url, tracking_uri, n, read_uri=backend if pg is not None else None,
                              write_direct=direct)
        procs.append(api)
        load0, commits0 = os.getloadavg()[0], pg_commits(pg)
        t0 = time.time()
        r = httpx.post(f"{base}/experiments", json=spec_body(n, per_unit), timeout=120)
        r.raise_for_status()
        submit_ms = (time.time() - t0) * 1000
        exp_id = r.json()["id"]
        reader, rss = Reader(base, exp_id), RssSampler(api.pid)
        reader.start()
        rss.start()
        status = "queued"
        while status not in ("succeeded", "failed", "cancelled") and time.time() - t0 < timeout_s:
            time.sleep(1.0)
            status = httpx.get(f"{base}/experiments/{exp_id}", timeout=120).json()["status"]
        wall = time.time() - t0
        reader.stop.set()
        rss.stop.set()
        reader.join()
        rss.join()
        load1, commits1 = os.getloadavg()[0], pg_commits(pg)
        detail = httpx.get(f"{base}/experiments/{exp_id}", timeout=120).json()
        timings = {}
        # with a baseline the report is built on every request; without, the stored one is served
        for name, tail in (("results_build_s", "?baseline=Xavier"), ("results_stored_s", "")):
            t = time.perf_counter()
            code = httpx.get(f"{base}/experiments/{exp_id}/results{tail}", timeout=600).status_code
            timings[name] = round(time.perf_counter() - t, 3) if code == 200 else f"HTTP {code}"
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "embinit", "report", f"scale-{n}", "--tracking-uri", backend,
                        "--format", "json"], check=True, stdout=subprocess.DEVNULL, cwd=work, timeout=900,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        timings["embinit_report_s"] = round(time.perf_counter() - t, 3)
        rows, errors = store_rows(backend), failures(backend)
        recorded = [(ts, c.get("finished", 0)) for ts, _, c in reader.timeline if c.get("finished")]
        rate = ((recorded[-1][1] - recorded[0][1]) / (recorded[-1][0] - recorded[0][0])
                if len(recorded) > 1 and recorded[-1][0] > recorded[0][0] else None)
        values = rows["metrics"] + rows["params"] + rows["tags"]
        return {
            "store": store, "trials": n, "trials_per_unit": per_unit,
            "mlflow_server_workers": mlflow_workers if pg is not None else None,
            "trial_writes": ("database behind the server" if direct else "server") if pg is not None else "store",
            **({"mlflow_server": "gunicorn"} if gunicorn and pg is not None else {}),
            "status": status, "error": detail.get("error"),
            "errors": errors, "counts": {k: v for k, v in detail["counts"].items() if isinstance(v, int)},
            "wall_s": round(wall, 1), "submit_ms": round(submit_ms, 1),
            "control_plane_ms_per_trial": round(1000 * wall / n, 1),
            "first_recorded_after_s": round(recorded[0][0] - t0, 1) if recorded else None,
            "trials_recorded_per_s": round(rate, 2) if rate else None,
            "mlflow_rows": rows, "mlflow_values_per_s": round(values / wall, 1),
            "mlflow_write_transactions_per_s": (round((commits1 - commits0) / wall, 1)
                                                if commits0 is not None else None),
            "reads_ms": {name: {"n": len(v), "p50": pct(v, 50), "p99": pct(v, 99), "max": pct(v, 100)}
                         for name, v in reader.latency.items()},
            "read_errors_5xx": reader.errors,
            "driver_rss_peak_mib": round(rss.driver_peak, 1), "api_rss_peak_mib": round(rss.api_peak, 1),
            **timings, "load_1min": [round(load0, 2), round(load1, 2)],
        }
    finally:
        for p in reversed(procs):
            if p is mlflow_proc:   # the mlflow server and its workers
                stop_group(p)
                continue
            p.terminate()
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        if pg is not None:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    from bench.machine import cpu_model
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", choices=("sqlite", "postgres"), action="append")
    ap.add_argument("--trials", type=int, nargs="+", default=[1000])
    ap.add_argument("--trials-per-unit", type=int, default=1, help="execution.trials_per_unit of the spec")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one case may run")
    ap.add_argument("--mlflow-workers", type=int, default=1,
                    help="the mlflow server's --workers (postgres); docker-compose.yml runs 1")
    ap.add_argument("--mlflow-gunicorn", action="store_true", help="run the mlflow server under gunicorn")
    ap.add_argument("--trial-writes", choices=("database", "server"), default="database",
                    help="postgres: the trials write their runs to the database behind the server "
                         "(EMBINIT_TRACKING_WRITE_DIRECT, as docker-compose.yml sets it) or through the server")
    ap.add_argument("--out", default=str(ROOT / "bench/results/bench_control_plane.json"))
    args = ap.parse_args()
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {"cases": []}
    results["machine"] = {"cpu": cpu_model(), "cores": os.cpu_count()}
    for store in args.store or ["sqlite"]:
        for n in args.trials:
            case = run_case(store, n, args.trials_per_unit, args.timeout, args.mlflow_workers,
                            args.mlflow_gunicorn, args.trial_writes)
            print(json.dumps(case), flush=True)
            results["cases"].append(case)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
