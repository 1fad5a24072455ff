"""API latency: p50/p99 of submitting specs and reading results with 1, 10 and 50 concurrent clients
on loopback, with 1,000 finished trials in the MLflow store (goal: p99 < 50 ms for reads at 50 clients).

    python bench/bench_api.py [--requests 600] [--out bench/results/bench_api.json]

The store is populated directly (MLflow runs written as the sweep writes them, no training); the API runs
under uvicorn in a subprocess with the in-process fake runner, so a submission measures validation,
path confinement, trial expansion and the state database, not a Ray actor starting. Clients are httpx
async clients in this process (they share the machine's cores with the server).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

N_TRIALS = 1000
LOAD_AT_START = os.getloadavg() if hasattr(os, "getloadavg") else None
STORE_SPEC = {"name": "bench-store", "tasks": ["synthetic_classification"], "inits": ["xavier", "normal"],
              "seeds": N_TRIALS // 2}


def _settings(work: Path):
    from service.settings import Settings
    return Settings(database_url=f"sqlite:///{work}/state.db", tracking_uri=f"sqlite:///{work}/mlflow.db",
                    data_roots=[work], pretrained_roots=[work], max_active_experiments=10 ** 6,
                    refresh_interval_s=2.0, _env_file=None)


def populate(work: Path) -> str:
    """1,000 finished trial runs in MLflow and their (succeeded) experiment in the state database."""
    import random

    from embinit.tracking import mlflow_store, records, run_writers, trial_run
    from embinit.spec import load_spec
    from service.db import Experiment, make_sessionmaker, utcnow
    from service.store import absolute_sqlite_uri

    settings = _settings(work)
    uri = mlflow_store.resolve_uri(settings.tracking_uri)
    spec = load_spec(STORE_SPEC)
    plan = spec.plan()
    exp_id = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp_id, uri, spec.spec_hash(), spec.to_yaml(), len(plan))
    client, rng = mlflow_store.client(uri), random.Random(0)
    from mlflow.entities import Metric
    t0 = time.time()
    for p in plan:
        # parent None: TrialRun.open then skips its look-up of an unfinished run (slow at 1,000 runs)
        run = trial_run.TrialRun.open(uri, exp_id, None, p.config, p.key, p.label, {"axes": {}, "point": {}})
        client.set_tag(run.run_id, records.PARENT_TAG, parent)
        now = int(time.time() * 1000)
        acc = 0.5 + 0.4 * rng.random()
        client.log_batch(run.run_id, metrics=[Metric("best/val/acc", acc, now, 0), Metric("best_epoch", 3, now, 0),
                                              Metric("val/acc", acc, now, 3), Metric("val/loss", 1 - acc, now, 3)])
        client.set_tag(run.run_id, records.STATUS_TAG, "finished")
        client.set_terminated(run.run_id, "FINISHED")
    client.set_terminated(parent, "FINISHED")
    print(f"populated {len(plan)} finished runs in {time.time() - t0:.0f} s", flush=True)
    sessions = make_sessionmaker(absolute_sqlite_uri(settings.database_url))
    with sessions() as s:
        s.add(Experiment(id="bench0000000", name=spec.name, spec=spec.canonical(), spec_hash=spec.spec_hash(),
                         trial_keys=[p.key for p in plan], n_trials=len(plan), status="succeeded",
                         counts={"pending": 0, "running": 0, "finished": len(plan), "failed": 0, "reused": 0},
                         tracking_uri=uri, mlflow_experiment=spec.experiment_name(), mlflow_experiment_id=exp_id,
                         started_at=utcnow(), finished_at=utcnow()))
        s.commit()
    return "bench0000000"


def serve(work: Path, port: int) -> None:
    import uvicorn

    from service.fakes import FakeCluster, FakeRunner
    from service.main import create_app
    from service.store import ResultStore
    settings = _settings(work)
    app = create_app(settings, runner=FakeRunner(FakeCluster()), store=ResultStore(settings.tracking_uri))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _spec_body(i: int) -> dict:
    return {"name": f"bench-submit-{i}", "tasks": ["synthetic_translation"], "inits": ["xavier", "normal"],
            "seeds": 3}


async def _load(base: str, concurrency: int, total: int, make_request) -> list[float]:
    """`concurrency` clients, each with its own connection (one httpx client each: a shared pool of 50
    connections costs the client ~9 ms of CPU per request, which would measure httpx, not the API)."""
    import httpx

    latencies: list[float] = []
    counter = iter(range(total))

    async def worker():
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            for i in counter:
                method, url, kwargs = make_request(i)
                t = time.perf_counter()
                r = await client.request(method, url, **kwargs)
                latencies.append((time.perf_counter() - t) * 1000)
                if r.status_code >= 400:
                    raise RuntimeError(f"{method} {url} -> {r.status_code}: {r.text[:200]}")
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=600, help="requests per endpoint and concurrency level")
    ap.add_argument("--out", default=str(ROOT / "bench/results/bench_api.json"))
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(Path(args.serve), args.port)
        return 0
    work = Path(tempfile.mkdtemp(prefix="embinit-bench-api-"))
    os.chdir(work)
    exp_id = populate(work)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(work), "--port", str(port)], cwd=work)
    base = f"http://127.0.0.1:{port}"
    try:
        import httpx
        for _ in range(120):
            try:
                if httpx.get(f"{base}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        t = time.perf_counter()
        httpx.get(f"{base}/experiments/{exp_id}/results", timeout=120).raise_for_status()
        cold_ms = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        httpx.get(f"{base}/experiments/{exp_id}/trials", timeout=120).raise_for_status()
        cold_trials_ms = (time.perf_counter() - t) * 1000
        submitted = iter(range(10 ** 9))
        endpoints = {
            "GET /experiments/{id} (status)": lambda i: ("GET", f"/experiments/{exp_id}", {}),
            "GET /experiments/{id}/results (json)": lambda i: ("GET", f"/experiments/{exp_id}/results", {}),
            "GET /experiments/{id}/results?format=markdown": lambda i: (
                "GET", f"/experiments/{exp_id}/results", {"params": {"format": "markdown"}}),
            "GET /experiments/{id}/trials?limit=100": lambda i: (
                "GET", f"/experiments/{exp_id}/trials", {"params": {"limit": 100}}),
            "GET /experiments (list)": lambda i: ("GET", "/experiments", {"params": {"limit": 20}}),
            "POST /experiments (new spec)": lambda i: ("POST", "/experiments", {"json": _spec_body(next(submitted))}),
            "POST /experiments (same spec again)": lambda i: ("POST", "/experiments", {"json": _spec_body(0)}),
        }
        rows = []
        import psutil
        proc = psutil.Process(server.pid)
        for name, make in endpoints.items():
            for conc in (1, 10, 50):
                asyncio.run(_load(base, conc, min(50, args.requests), make))  # warm-up
                cpu0, client0, wall0 = sum(proc.cpu_times()[:2]), time.process_time(), time.perf_counter()
                lat = asyncio.run(_load(base, conc, args.requests, make))
                wall = time.perf_counter() - wall0
                # CPU per request separates the service's cost from the machine's load: latency at 50
                # clients is mostly queueing for the cores (closed loop: latency ~ clients / throughput).
                server_cpu = (sum(proc.cpu_times()[:2]) - cpu0) / len(lat) * 1000
                client_cpu = (time.process_time() - client0) / len(lat) * 1000
                row = {"endpoint": name, "clients": conc, "requests": len(lat), "p50_ms": round(_pct(lat, 50), 2),
                       "p99_ms": round(_pct(lat, 99), 2), "mean_ms": round(statistics.mean(lat), 2),
                       "throughput_rps": round(len(lat) / wall, 1), "server_cpu_ms_per_request": round(server_cpu, 3),
                       "client_cpu_ms_per_request": round(client_cpu, 3)}
                rows.append(row)
                print(f"{name:48s} clients={conc:3d}  p50={row['p50_ms']:7.2f} ms  p99={row['p99_ms']:7.2f} ms  "
                      f"{row['throughput_rps']:6.0f} req/s  server cpu {server_cpu:.2f} ms/req", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    load_at_start = LOAD_AT_START
    result = {"benchmark": "bench_api", "trials_in_store": N_TRIALS, "requests_per_level": args.requests,
              "cold_results_ms": round(cold_ms, 1), "cold_trials_ms": round(cold_trials_ms, 1), "rows": rows,
              "goal": "p99 < 50 ms for reads at 50 clients",
              "machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": os.cpu_count(), "loadavg_at_start": load_at_start, "loadavg_at_end": load},
              "notes": "uvicorn (1 process) in a subprocess; httpx async clients in the same machine; "
                       "submissions use the fake runner (no Ray actor is started)"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"cold results read (report built from MLflow, {N_TRIALS} trials): {cold_ms:.0f} ms; "
          f"cold trials read: {cold_trials_ms:.0f} ms; written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
