"""`embinit run SPEC.yaml`: run an experiment spec as a Ray Tune sweep recorded in MLflow.

`--dry-run` validates the spec and prints the expanded trial list and its size without running
anything. Re-running the same spec resumes it: trials that already have a finished MLflow run are
reused, never trained twice.
"""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run an experiment spec (a sweep on Ray Tune, recorded in MLflow)")
    p.add_argument("spec", help="experiment spec YAML (see tune_configs/)")
    p.add_argument("--dry-run", action="store_true", help="print the expanded trials and their number, run nothing")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: the spec's, else sqlite:///mlflow.db)")
    p.add_argument("--quiet", action="store_true", help="no progress lines and no final table")
    p.set_defaults(func=run)


def dry_run(spec) -> str:
    """The expanded trial list as text, one trial a line, and the total."""
    plan = spec.plan()
    lines = [f"{'#':>4}  {'key':16}  {'task':24} {'init':22} seed  settings"]
    for i, p in enumerate(plan):
        settings = {**p.axes, **p.point}
        lines.append(f"{i:>4}  {p.key}  {p.task:24} {p.label:22} {p.seed:>4}  "
                     f"{json.dumps(settings) if settings else ''}".rstrip())
    total = spec.num_trials()
    if spec.search is not None and spec.search.method == "optuna":
        lines.append(f"optuna: {spec.search.num_samples} points x {len(spec.seeds)} seeds for each of the "
                     f"{len(plan) // len(spec.seeds)} (task, init, axes) groups above, drawn while running")
    lines.append(f"{total} trials; MLflow experiment {spec.experiment_name()!r} at {spec.tracking_uri()}")
    return "\n".join(lines)


def run(args) -> int:
    from embinit.spec import load_spec
    spec = load_spec(args.spec)
    if args.dry_run:
        print(dry_run(spec))
        return 0
    from embinit.sweep import run_sweep
    try:
        result = run_sweep(spec, address=args.address, tracking_uri=args.tracking_uri, progress=not args.quiet)
    except KeyboardInterrupt:
        print(f"embinit: interrupted. Trials that finished are kept in MLflow; the stopped ones are marked "
              f"'interrupted'. Run `embinit run {args.spec}` again to resume: finished trials are reused, "
              f"the rest train.", file=sys.stderr, flush=True)
        return 130
    print(f"{result.n_finished}/{result.planned} trials finished ({result.reused} reused), {result.n_failed} "
          f"failed, in {result.wall_s:.0f} s. MLflow: experiment {result.experiment!r} at {result.tracking_uri}; "
          f"open the UI with: mlflow ui --backend-store-uri {result.tracking_uri}")
    return 1 if result.n_failed or result.cancelled else 0
