"""`embinit run SPEC.yaml`: run an experiment spec as a Ray Tune sweep recorded in MLflow.

`--dry-run` validates the spec and prints the expanded trial list, its epochs, model sizes and cost
without running anything; `--prune-checkpoints` removes the checkpoint folders of trials the spec no
longer plans, and their object-store copies (embinit.cli.prune), and runs nothing either. `key=value`
arguments after the spec override it for this run (embinit.spec.overrides):
`embinit run SPEC epochs=2 seeds=2 inits=xavier,glove --dry-run`.
`--store-uri` (or $EMBINIT_TRACKING_STORE_URI) with an `mlflow server` tracking URI: the trials write
their run records to the database behind the server (checked to be it first), as the service does with
EMBINIT_TRACKING_WRITE_DIRECT. Re-running the same spec resumes it: trials that already have a finished
MLflow run are reused, never trained twice. A run ends with its next steps, as commands that run as
printed (embinit.commands).
"""

from __future__ import annotations

import os
import signal
import sys

from embinit.cli.dry_run import dry_run
from embinit.commands import TRACKING_URI_ENV, command, env_note, next_steps, uri_arg
from embinit.redact import masked

STORE_ENV = "EMBINIT_TRACKING_STORE_URI"


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run an experiment spec (a sweep on Ray Tune, recorded in MLflow)")
    p.add_argument("spec", help="experiment spec YAML (see tune_configs/)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="override the spec for this run, e.g. epochs=2 seeds=2 inits=xavier,glove (a "
                        "hyperparameter applies to every task; unless name= or mlflow.experiment= is given, "
                        "the MLflow experiment is named after the overrides)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the expanded trials, their epochs, model sizes and cost; run nothing")
    p.add_argument("--prune-checkpoints", action="store_true",
                   help="remove the checkpoint folders of the spec's experiment whose trials the spec no longer "
                        "plans (interrupted, then the spec was edited: nothing resumes them; the dry run counts "
                        "them), and their copies in the object store (EMBINIT_STORAGE_URI) when one is "
                        "configured; run nothing")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default: the spec's, else sqlite:///mlflow.db)")
    p.add_argument("--store-uri", default=os.environ.get(STORE_ENV) or None,
                   help="with an `mlflow server` --tracking-uri: the SQL database behind it; the trials then "
                        "write their run records there directly and only their artifacts through the server "
                        f"(docs/deployment.md). Default: ${STORE_ENV}, which keeps the password out of the "
                        "process list")
    p.add_argument("--quiet", action="store_true", help="no progress lines and no final table")
    p.set_defaults(func=run)


def run(args) -> int:
    from embinit.cli import supervise
    if getattr(args, "command_line", False) and not (args.dry_run or args.prune_checkpoints) and supervise.wanted():
        # the sweep runs in a child process, its local Ray out of reach of a signal to this one's group
        return supervise.supervise(sys.argv[1:], lambda how, code: _farewell_supervised(args, how, code))
    from embinit.sweep import guardian
    guardian.take()   # this process is that child: it tells its supervisor which runs it holds open
    from embinit.spec.full_check import check_spec
    # every problem `run` would refuse in one list: fields, missing files (a sweep on a cluster leaves the
    # data folders to its nodes), dimensions that do not fit
    spec = check_spec(args.spec, args.overrides, local=args.dry_run or args.prune_checkpoints or args.address is None)
    if args.prune_checkpoints:
        from embinit.cli.prune import prune_checkpoints
        print(prune_checkpoints(spec, args.tracking_uri))
        return 0
    if args.dry_run:
        print(dry_run(spec, args.tracking_uri, f"{resume_command(args)} --prune-checkpoints"))
        return 0
    from embinit.sweep import run_sweep
    from embinit.sweep.interrupt import terminate_as_interrupt
    # SIGTERM (kill, a container stop) and SIGHUP (the terminal hung up) as Ctrl-C; said the same when the
    # local Ray died under the driver (embinit.sweep.abandon)
    with terminate_as_interrupt(lambda how, error: _farewell(args, how, error)) as terminated:
        return _sweep(args, spec, run_sweep, terminated)


def _farewell(args, how: str, error: str | None) -> None:
    if error is None:
        _say_interrupted(args, how)
    else:   # the local Ray died with no signal (the OOM killer, a crash): the runs were closed FAILED
        from embinit.sweep.hangup import say
        say(f"embinit: error: the sweep stopped: {error}. What MLflow holds is kept (the sweep's run and its "
            f"unfinished trials' runs are closed as FAILED with this error; their checkpoints are kept); run "
            f"{_resume(args)} again to resume: finished trials are reused, the stopped ones go on "
            f"from their last checkpoint.")


def _farewell_supervised(args, how: str | None, code: int) -> None:
    """What the supervisor says when it closed the runs of a driver that ended without closing them."""
    if how is not None:
        _say_interrupted(args, how)
        return
    from embinit.sweep.guardian import how_ended
    from embinit.sweep.hangup import say
    say(f"embinit: error: the sweep's driver ended ({how_ended(code)}) without closing its MLflow runs; they are "
        f"closed as interrupted and their checkpoints kept: run {_resume(args)} again to resume: finished "
        f"trials are reused, the stopped ones go on from their last checkpoint.")


def _say_interrupted(args, how: str) -> None:
    from embinit.sweep import guardian
    from embinit.sweep.hangup import say   # the terminal may be gone (SIGHUP)
    say(f"embinit: interrupted ({how}). Trials that finished are kept in MLflow; the stopped ones are marked "
        f"'interrupted'. Run {_resume(args)} again to resume: finished trials are reused, the rest "
        f"train.")
    guardian.said_interrupted()   # in the driver: its supervisor, which may close its runs after it, says it once


def _sweep(args, spec, run_sweep, terminated) -> int:
    from embinit.sweep.interrupt import how_interrupted
    from mlflow.exceptions import MlflowException

    from embinit.sweep.run import error_text
    try:
        result = run_sweep(spec, address=args.address, tracking_uri=args.tracking_uri, progress=not args.quiet,
                           store_uri=args.store_uri)
    except KeyboardInterrupt as e:   # 128 + the signal's number, as a shell reports a process it ended
        _say_interrupted(args, terminated() or how_interrupted(e))
        return 128 + (signal.Signals[terminated()] if terminated() else signal.SIGINT)
    except BrokenPipeError:
        raise
    except OSError as e:   # the filesystem or the network refused (a folder, a store): said without a traceback
        print(f"embinit: error: the sweep stopped: {error_text(e)}. What MLflow holds is kept (the sweep's run, "
              f"if it was opened, is closed as FAILED with this error); fix the cause and run "
              f"{_resume(args)} again to resume: finished trials are reused.", file=sys.stderr, flush=True)
        return 1
    except MlflowException as e:
        # the tracking store refused (its disk is full, it is locked or gone): said without a traceback, and
        # without a claim that the runs were closed, which needed that store
        print(f"embinit: error: the sweep stopped: the MLflow store failed: {error_text(e)}. What it holds is "
              f"kept; runs it could not close stay RUNNING until the spec runs again, which closes them as "
              f"interrupted (their driver is gone) and resumes: fix the cause and run {_resume(args)} again.",
              file=sys.stderr, flush=True)
        return 1
    # a key another sweep trained while this one ran (it waited on the key's claim) is no work of this one
    shared = f", {result.shared} trained meanwhile by another sweep" if result.shared else ""
    # a diverged trial ran to its end (it counts as finished) but has no value: the table's n leaves it out
    n_diverged = result.count("diverged")
    diverged = f", {n_diverged} diverged" if n_diverged else ""
    print(f"{result.n_finished}/{result.planned} trials finished ({result.reused} reused{shared}{diverged}), "
          f"{result.n_failed} failed, in {result.wall_s:.0f} s. MLflow: experiment {result.experiment!r} at "
          f"{masked(result.tracking_uri)}")
    print("\n".join(next_steps(result.experiment, result.tracking_uri, experiment_id=result.experiment_id)),
          flush=True)
    return 1 if result.n_failed or result.cancelled else 0


def resume_command(args) -> str:
    """This run's command as it runs again: the spec, overrides, cluster and stores it was given (a store
    URL from $EMBINIT_TRACKING_STORE_URI stays there); a URL with a password is taken from the environment
    (`embinit.commands.uri_arg`: $EMBINIT_TRACKING_URI, $EMBINIT_TRACKING_STORE_URI), never printed, and
    `_resume` says what to set."""
    extra = _resume_flags(args)
    return command("embinit", "run", args.spec, *args.overrides, *extra)


def _resume(args) -> str:
    """`resume_command` in backquotes, for a sentence, and what to set before it runs, if anything."""
    note = env_note(*_resume_flags(args))
    return f"`{resume_command(args)}`" + (f" ({note})" if note else "")


def _resume_flags(args) -> list:
    extra: list = []
    given_store = args.store_uri if args.store_uri != os.environ.get(STORE_ENV) else None
    for flag, value, env in (("--address", args.address, None), ("--tracking-uri", args.tracking_uri, TRACKING_URI_ENV),
                             ("--store-uri", given_store, STORE_ENV)):
        extra += [flag, uri_arg(value, env) if env else value] if value else []
    return extra
