"""Benchmark: what a Tune trial pays to find its unit, with the sweep's units handed to the trainable as
a plain list (before) and as an `embinit.sweep.unit_table.UnitTable` (after).

Tune's `with_parameters` fetches and unpickles its values at every call of the trainable. One Ray actor
stands in for a reused Tune worker: it calls the `with_parameters` trainable `--calls` times (a Tune
trial each), and each call looks its unit up as `train_unit` does. The units are the real plan of the
control-plane bench's spec (`bench_control_plane.spec_body`: 2 tasks x 2 inits x N/4 seeds, noop trainer,
one trial per unit). Reported per N: ms per call for each (the first call apart: it fetches the table
once), the pickled size of the list, and the ratio.

Usage: python bench/bench_unit_fetch.py [--trials 1000 10000] [--calls 30]
Writes bench/results/unit_fetch.json (with lscpu's model) and prints a markdown row per N.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_control_plane import spec_body  # noqa: E402
from machine import cpu_model  # noqa: E402  (bench/machine.py)


def find_unit(config, units):
    """What train_unit does first: its unit, by the index Tune's grid gave it."""
    return units[config["unit"]].trials[0].key


def measure(units, table: bool, calls: int) -> dict:
    import ray
    from ray import tune

    from embinit.sweep.unit_table import UnitTable

    fn = tune.with_parameters(find_unit, units=UnitTable(units) if table else units)

    @ray.remote(num_cpus=1)
    class Worker:
        def run(self, fn, n: int, calls: int) -> list[float]:
            out = []
            for i in range(calls):
                t = time.process_time()
                fn({"unit": (i * 7919) % n})
                out.append(time.process_time() - t)
            return out

    times = ray.get(Worker.remote().run.remote(fn, len(units), calls))
    rest = sorted(times[1:])
    return {"first_ms": round(1000 * times[0], 2), "median_ms": round(1000 * rest[len(rest) // 2], 3),
            "mean_ms": round(1000 * sum(rest) / len(rest), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--out", default=str(ROOT / "bench/results/unit_fetch.json"))
    args = ap.parse_args()
    import ray
    import ray.cloudpickle

    from embinit.spec.loading import load_spec
    from embinit.sweep.ray_runtime import default_env, local_ray_options
    from embinit.sweep.work import units_to_run

    default_env()
    with local_ray_options() as local:
        ray.init(num_cpus=2, log_to_driver=False, **local)
    rows = []
    try:
        for n in args.trials:
            units, _ = units_to_run(load_spec(spec_body(n, 1)), set())
            before, after = measure(units, False, args.calls), measure(units, True, args.calls)
            size = len(ray.cloudpickle.dumps(units))
            rows.append({"trials": n, "units": len(units), "pickled_mb": round(size / 1e6, 2),
                         "list": before, "table": after,
                         "ratio_mean": round(before["mean_ms"] / max(after["mean_ms"], 1e-3), 1)})
            r = rows[-1]
            print(f"| {n} | {r['pickled_mb']} MB | {before['mean_ms']} ms | {after['mean_ms']} ms "
                  f"(first {after['first_ms']} ms) | {r['ratio_mean']}x |", flush=True)
    finally:
        ray.shutdown()
    Path(args.out).write_text(json.dumps({"cpu": cpu_model(), "cores": os.cpu_count(), "calls": args.calls,
                                          "date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
