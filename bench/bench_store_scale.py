"""How the driver-side reads grow with a sweep's size: planning, the dry run, dedup, the report and the
service's reads, over an MLflow store holding a partly finished sweep of N trials.

    python bench/bench_store_scale.py [--sizes 50 200 800] [--repeats 3]

For each N, a fresh SQLite store gets the spec's sweep run and 3/4 of its N trials as finished runs,
written the way a sweep's worker writes them (the key's lookup, `TrialRun.open`, `TrialRun.finish` of
a no-work result, 3 s of wall time), plus N/4 finished trials of another experiment (the dry run's
seconds per epoch read every experiment). The spec: synthetic_translation and synthetic_classification
x 4 inits (one from the quickstart's GloVe-format file, so keys hash a file) x N/8 seeds. Then, best of
`--repeats`, each operation as its caller runs it:

- `check_spec`: `embinit run`'s validation (with the model-size check), `plan`: the grid's expansion;
- `dry_run`: `embinit run --dry-run` after its check (plan, dedup and marks against the store, the cost);
- `dedup`: what `run_sweep` reads before Tune starts (`finished_keys` + `units_to_run`);
- `key_lookup`: one worker's read of its key's runs (`key_records`), the mean of 20 keys;
- `report`: `build_report` + its markdown (`embinit report` without the CLI's imports);
- `service_trials`, `service_report`: the API's `/trials` and `/results` builds (`service.store.ResultStore`,
  uncached).

It prints wall and CPU seconds and SQL statements per operation and N, and each operation's growth as
the ratio of CPU times t(largest N) / t(N/4 of it) (wall time moves with a shared machine's load): ~4 is
linear, ~16 quadratic, ~1 constant (key_lookup). Results are
appended to bench/results/store_scale.json.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import append_result, cpu_model  # noqa: E402

VECTORS = ROOT / "tune_configs" / "data" / "synthetic_vectors.txt"
TASKS = ["synthetic_translation", "synthetic_classification"]
INITS = ["xavier", "normal", "xavier_normal", {"tgt": {"source": "glove", "transform": "standardize"}, "src": "xavier"}]


def spec_data(n: int, uri: str) -> dict:
    return {"name": f"scale-{n}", "tasks": TASKS, "inits": INITS, "seeds": max(1, n // 8),
            "pretrained": {"glove": str(VECTORS)}, "defaults": {"epochs": 2},
            "resources": {"cpus": 0.25}, "execution": {"trainer": "noop"}, "mlflow": {"tracking_uri": uri}}


def record(uri: str, exp_id: str, parent: str, p, result: dict) -> None:
    """One finished trial of the planned trial `p`, as a sweep's worker records it (the key's runs read
    once, `TrialRun.open`, `TrialRun.finish`; bench_trial_writes.record with the plan's label and group)."""
    from embinit.tracking import run_readers, trial_run
    key_runs = run_readers.key_records(exp_id, uri, p.key)
    run = trial_run.TrialRun.open(uri, exp_id, parent, p.config, p.key, p.label, {"axes": p.axes, "point": p.point},
                                  key_runs=key_runs)
    run.finish(result, [])


def build(n: int, work: Path) -> tuple[dict, str]:
    """A store with the spec's sweep run, 3/4 of its trials finished, and another experiment's N/4."""
    from embinit.tracking import mlflow_store, run_writers
    from embinit.config import TrialConfig
    from embinit.spec.full_check import check_spec
    from embinit.sweep.noop import noop_result
    from embinit.tracking.prepare import prepare_store
    uri = f"sqlite:///{work}/mlflow.db"
    prepare_store(uri)
    data = spec_data(n, uri)
    spec = check_spec(data)
    plan = spec.plan()
    other = check_spec({**data, "name": f"other-{n}", "seeds": max(1, n // 32)}).plan()
    for name, trials, share in ((spec.name, plan, 3 / 4), (f"other-{n}", other, 1)):
        exp_id = mlflow_store.ensure_experiment(name, uri)
        parent = run_writers.start_parent_run(exp_id, uri, spec.spec_hash(), spec.to_yaml(), len(trials), run_name=name)
        for p in trials[:int(len(trials) * share)]:
            cfg = TrialConfig.from_dict(p.config)
            record(uri, exp_id, parent, p, {**noop_result(cfg, p.label), "wall_time_s": 3.0})
        run_writers.end_parent_run(parent, uri, "KILLED", None, {})
    return data, uri


def operations(data: dict, uri: str) -> dict:
    """name -> a function doing what its caller does (fresh objects each call: no warm caches)."""
    from embinit.tracking import mlflow_store, run_readers
    from embinit.cli.dry_run import dry_run
    from embinit.report.table import build_report
    from embinit.spec.full_check import check_spec
    from embinit.sweep.work import units_to_run
    from service.store import ResultStore
    spec = check_spec(data)
    plan = spec.plan()
    exp_id = mlflow_store.experiment_id(spec.experiment_name(), uri)
    keys = [p.key for p in plan]
    probe = keys[:: max(1, len(keys) // 20)][:20]
    exp = SimpleNamespace(id="x", updated_at=0, status="succeeded", mlflow_experiment=spec.experiment_name(),
                          tracking_uri=uri, trial_keys=keys, spec=data, spec_hash=spec.spec_hash(), created_at=None)

    def key_lookup():
        for key in probe:
            run_readers.key_records(exp_id, uri, key)
    return {"check_spec": lambda: check_spec(data),
            "plan": spec.plan,
            "dry_run": lambda: dry_run(check_spec(data)),
            "dedup": lambda: units_to_run(spec, set(run_readers.finished_keys(exp_id, uri)), plan),
            "key_lookup": key_lookup,
            "report": lambda: build_report(spec.experiment_name(), uri).to_markdown(),
            "service_trials": lambda: ResultStore(uri).trials(exp),
            "service_report": lambda: ResultStore(uri).report(exp)}


def measure(data: dict, uri: str, repeats: int, statements: collections.Counter) -> dict:
    out = {}
    for name, fn in operations(data, uri).items():
        best, cpu, stmts = float("inf"), float("inf"), 0
        for _ in range(repeats):
            statements.clear()
            t, c = time.perf_counter(), time.process_time()
            fn()
            best, cpu = min(best, time.perf_counter() - t), min(cpu, time.process_time() - c)
            stmts = statements["n"]
        per = 20 if name == "key_lookup" else 1
        out[name] = {"s": round(best / per, 4), "cpu_s": round(cpu / per, 4), "sql_statements": stmts / per}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 800])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "store_scale.json")
    args = ap.parse_args(argv)
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    statements: collections.Counter = collections.Counter()
    event.listen(Engine, "before_cursor_execute", lambda *a: statements.update(["n"]))
    load = [round(os.getloadavg()[0], 2)]
    rows = {}
    for n in args.sizes:
        t = time.perf_counter()
        data, uri = build(n, Path(tempfile.mkdtemp(prefix=f"embinit-scale-{n}-")))
        built = time.perf_counter() - t
        rows[n] = measure(data, uri, args.repeats, statements)
        rows[n]["_build_s"] = round(built, 1)
        print(f"N={n} (store built in {built:.0f} s)")
        for name, r in rows[n].items():
            if not name.startswith("_"):
                print(f"  {name:16} {r['s']:8.4f} s  {r['cpu_s']:8.4f} s CPU  {r['sql_statements']:>6} SQL statements")
    load.append(round(os.getloadavg()[0], 2))
    big = max(args.sizes)
    small = min((n for n in args.sizes if n * 4 >= big), default=None)
    ratios = {} if small in (None, big) else {   # of CPU time: the wall time moves with the machine's load
        name: round(rows[big][name]["cpu_s"] / max(rows[small][name]["cpu_s"], 1e-9), 2) for name in rows[big]
        if not name.startswith("_")}
    if ratios:
        print(f"growth, CPU time t({big}) / t({small}) (x{big / small:g} trials):",
              ", ".join(f"{k} {v}" for k, v in ratios.items()))
    result = {"bench": "store_scale", "cpu": cpu_model(), "cores": os.cpu_count(), "load_1min": load,
              "sizes": {str(n): r for n, r in rows.items()}, "growth": {"from": small, "to": big, "ratios": ratios},
              "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    append_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
