"""`embinit report EXPERIMENT`: the paper's Table 1 for an MLflow experiment (mean (σ), n, best epoch,
95% CI per task x init), read from MLflow alone, with each init's difference from a baseline init
(`--baseline`, default Xavier) and a verdict; `--plot DIR` writes Figure-1-style mean curves."""

from __future__ import annotations

from embinit.cli.arg_types import folder_to_write


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="Table 1 (mean, σ, n, 95%% CI per task x init) from MLflow")
    p.add_argument("experiment", help="MLflow experiment name (the spec's name)")
    p.add_argument("--format", choices=("markdown", "csv", "json", "latex"), default="markdown")
    p.add_argument("--plot", metavar="DIR", type=folder_to_write, default=None,
                   help="write mean validation curves per init to DIR")
    p.add_argument("--baseline", metavar="LABEL", default=None,
                   help="compare each init with this one: difference, 95%% CI, verdict (default: Xavier)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///mlflow.db)")
    p.set_defaults(func=run)


def run(args) -> int:
    from embinit.tracking.store_check import require_store
    from embinit.report.table import build_report
    require_store(args.tracking_uri)
    report = build_report(args.experiment, args.tracking_uri, baseline=args.baseline)
    if not report.rows and not report.failed:   # an empty table is no report, as a missing experiment is none
        from embinit.tracking.run_readers import no_trial_runs
        raise no_trial_runs(args.experiment, args.tracking_uri)
    text = {"markdown": report.to_markdown, "csv": report.to_csv, "json": report.to_json,
            "latex": report.to_latex}[args.format]()
    print(text, end="" if text.endswith("\n") else "\n")
    if args.plot:
        for path in report.plot(args.plot):
            print(f"wrote {path}")
    return 0
