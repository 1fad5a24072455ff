"""One trial's MLflow path, alone: what each recorded trial costs the store, without Ray or the service.

    python bench/bench_trial_writes.py [--trials 200] [--prefill 0] [--server [--server-workers 1] [--direct]]

N no-work trials (`embinit.sweep.noop.noop_result`) go, one after another, through what a sweep's worker
does with MLflow per trial: the key's dedup lookup, opening its run in the sweep (`TrialRun.open`) and
recording its result (`TrialRun.finish`), on a fresh SQLite store (`--prefill M`: that store already holds
M finished trials of the experiment, to see how the per-trial cost grows with the experiment). It reports
ms per trial, SQLite transactions (commits) and statements per trial, and the time of each MLflow client
call. SQLite has one writer, so commits per trial bound every sweep on one store however many workers
write to it. Then it reads every trial record of the experiment (prefill + N) both ways, with MLflow's
`search_runs` and with embinit's SQL reader (`embinit.tracking.run_table`, what the report and the service use),
and gives the ratio. `--server`: the trials write through an `mlflow server` in front of that store, run as
docker-compose.yml runs it (one worker, the job runner off), and the bench counts the HTTP requests per
trial by endpoint (the store's commits are then the server's, not counted) and the server's CPU time;
`--server --direct`: the run's records go to the store itself and only its artifacts through the server,
as a sweep given `EMBINIT_TRACKING_WRITE_DIRECT` writes them. Results go to
bench/results/bench_trial_writes.json (one entry per run, appended).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import append_result, cpu_model  # noqa: E402


def _count_sql(counts: collections.Counter) -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "commit", lambda conn: counts.update(["commits"]))
    event.listen(Engine, "before_cursor_execute", lambda *a: counts.update(["statements"]))


def _time_client_calls(times: collections.defaultdict) -> None:
    """Every public MlflowClient method, timed (nested calls count in their caller only)."""
    from mlflow import MlflowClient
    depth = [0]

    def wrap(name, fn):
        @functools.wraps(fn)
        def timed(*a, **kw):
            depth[0] += 1
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    times[name].append(time.perf_counter() - t)
        return timed
    for name in dir(MlflowClient):
        if not name.startswith("_") and callable(getattr(MlflowClient, name)):
            setattr(MlflowClient, name, wrap(name, getattr(MlflowClient, name)))


def _count_requests(counts: collections.Counter) -> None:
    """Every HTTP request the MLflow client sends, by endpoint (artifact uploads as `artifacts PUT`)."""
    import requests
    send = requests.Session.request

    def counted(self, method, url, *a, **kw):
        counts["artifacts " + method if "/mlflow-artifacts/" in url else url.split("/api/2.0/mlflow/")[-1]] += 1
        return send(self, method, url, *a, **kw)
    requests.Session.request = counted


def _trials(n: int, first_seed: int):
    from embinit.config import TrialConfig
    from embinit.sweep.noop import noop_result
    for seed in range(first_seed, first_seed + n):
        cfg = TrialConfig.from_dict({"task": "synthetic_classification", "init": "xavier", "seed": seed,
                                     "epochs": 5})
        yield cfg, noop_result(cfg, "Xavier")


def record(uri: str, exp_id: str, parent: str, cfg, res, artifacts_via: str | None = None) -> None:
    """What a worker does with MLflow for one trial (embinit.sweep.trainable._run_one, noop); `uri`: where
    it writes the run's records, `artifacts_via`: the server its artifacts go through (`--direct`)."""
    from embinit.tracking import run_readers, trial_run
    key = cfg.key()
    key_runs = run_readers.key_records(exp_id, uri, key)   # has it a result? an unfinished run here?
    if run_readers.newest_finished(key_runs) is not None:
        raise AssertionError(f"{key} already has a result")
    run = trial_run.TrialRun.open(uri, exp_id, parent, cfg.to_dict(), key, "Xavier", {"init": "Xavier"},
                                  key_runs=key_runs, artifacts_via=artifacts_via)
    run.finish(res, [])


def _cpu_s(proc) -> float:
    """CPU seconds (user + system) of a process and its children so far; 0 without one."""
    if proc is None:
        return 0.0
    import psutil
    root = psutil.Process(proc.pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _reads(uri: str, exp_id: str) -> dict:
    """Every trial record of the experiment, read with `search_runs` and with the SQL reader (best of 3
    each, alternating); the records must be the same."""
    from embinit.tracking import mlflow_store, records, run_table
    ways = {"search_runs": lambda: records.from_runs(mlflow_store.search_runs(exp_id, uri)),
            "sql": lambda: records.from_runs(run_table.rows(exp_id, uri))}
    best, got = {w: float("inf") for w in ways}, {}
    for _ in range(3):
        for way, read in ways.items():
            t = time.perf_counter()
            got[way] = read()
            best[way] = min(best[way], time.perf_counter() - t)
    assert [r.run_id for r in got["sql"]] == [r.run_id for r in got["search_runs"]]
    return {"runs": len(got["sql"]), **{f"{w}_s": round(v, 3) for w, v in best.items()},
            "ms_per_run_search_runs": round(1000 * best["search_runs"] / len(got["sql"]), 3),
            "ms_per_run_sql": round(1000 * best["sql"] / len(got["sql"]), 3),
            "speedup": round(best["search_runs"] / best["sql"], 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--prefill", type=int, default=0)
    ap.add_argument("--server", action="store_true", help="write through an mlflow server (HTTP requests counted)")
    ap.add_argument("--server-workers", type=int, default=1, help="its --workers (compose runs 1)")
    ap.add_argument("--direct", action="store_true",
                    help="with --server: the run's records go to the store itself, only its artifacts through "
                         "the server (EMBINIT_TRACKING_WRITE_DIRECT)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "bench_trial_writes.json")
    args = ap.parse_args(argv)
    from embinit.tracking.prepare import prepare_store

    work = Path(tempfile.mkdtemp(prefix="embinit-writes-"))
    store = uri = f"sqlite:///{work}/mlflow.db"
    prepare_store(store)
    server = None
    if args.server:
        from bench.bench_control_plane import start_mlflow_server
        uri, server = start_mlflow_server(work, store, args.server_workers)
    try:
        return _measure(args, uri, store, server)
    finally:
        if server is not None:
            from bench.bench_control_plane import stop_group
            stop_group(server)


def _measure(args, uri: str, store: str, server=None) -> int:
    from embinit.tracking import run_writers
    from embinit.tracking.mlflow_store import ensure_experiment
    exp_id = ensure_experiment("writes", uri)
    parent = run_writers.start_parent_run(exp_id, uri, "0" * 64, "name: writes\n", args.trials + args.prefill)
    direct = args.server and args.direct
    records_to, via = (store, uri) if direct else (uri, None)
    for cfg, res in _trials(args.prefill, 10**6):
        record(records_to, exp_id, parent, cfg, res, via)
    counts: collections.Counter = collections.Counter()
    requests_made: collections.Counter = collections.Counter()
    times: collections.defaultdict = collections.defaultdict(list)
    _count_sql(counts)
    _count_requests(requests_made)
    _time_client_calls(times)
    trials = list(_trials(args.trials, 0))
    load = os.getloadavg()[0]
    cpu0, server_cpu0 = time.process_time(), _cpu_s(server)
    t0 = time.perf_counter()
    for cfg, res in trials:
        record(records_to, exp_id, parent, cfg, res, via)
    wall = time.perf_counter() - t0
    cpu, server_cpu = time.process_time() - cpu0, _cpu_s(server) - server_cpu0
    n = args.trials
    calls = {name: {"calls_per_trial": round(len(v) / n, 2), "ms_per_trial": round(1000 * sum(v) / n, 2)}
             for name, v in sorted(times.items(), key=lambda kv: -sum(kv[1]))}
    load_end = os.getloadavg()[0]
    reads = _reads(store, exp_id)   # the store itself (behind the server, with --server)
    local = not args.server or direct
    row = {"bench": "trial_writes", "cpu": cpu_model(), "trials": n, "prefill": args.prefill,
           "server": args.server, "server_workers": args.server_workers if args.server else None,
           "records": "store (artifacts through the server)" if direct else ("server" if args.server else "store"),
           "ms_per_trial": round(1000 * wall / n, 2),
           "client_cpu_ms_per_trial": round(1000 * cpu / n, 2),
           "server_cpu_ms_per_trial": round(1000 * server_cpu / n, 2) if server is not None else None,
           "commits_per_trial": round(counts["commits"] / n, 2) if local else None,
           "statements_per_trial": round(counts["statements"] / n, 1) if local else None,
           "http_requests_per_trial": {k: round(v / n, 2) for k, v in sorted(requests_made.items())},
           "calls": calls, "read_all": reads,
           "load_1min": [round(load, 2), round(load_end, 2)]}
    print(json.dumps(row, indent=1))
    append_result(args.out, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
