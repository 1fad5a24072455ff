"""`embinit reproduction`: docs/reproduction.md -- the paper's Tables 1-4 beside this installation's own
runs, read from MLflow (see embinit.reproduction), with the findings' verdicts and small CSV/JSON exports."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("reproduction", help="the reproduction report (paper vs embinit) from MLflow",
                              description="Write the reproduction report from the MLflow records of the GPU specs "
                                          "(tune_configs/gpu/) or, when the store has none of those, the "
                                          "superseded CPU specs (tune_configs/offline/), and the Table-4 analogy "
                                          "runs. Experiments not run yet are shown as such.")
    p.add_argument("--inputs", choices=("auto", "gpu", "offline", "paper"), default="auto",
                   help="which sweeps to read: the GPU specs of tune_configs/gpu/, the superseded CPU specs of "
                        "tune_configs/offline/, the paper's own 12 Table-1 experiments of tune_configs/paper/ "
                        "(paper; never chosen by auto), or (auto, the default) the first of gpu, offline whose "
                        "experiments the store holds")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///mlflow.db)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the markdown here (default: stdout)")
    p.add_argument("--exports", default=None, metavar="DIR", help="write reproduction.json and CSV tables here")
    p.add_argument("--preamble", default=None, metavar="FILE", help="markdown put before the generated tables")
    p.add_argument("--epilogue", default=None, metavar="FILE", help="markdown put after them")
    p.set_defaults(func=run)


def file_problems(args) -> list[str]:
    """What is wrong with the files the command reads (--preamble, --epilogue) and writes (--out, --exports),
    found before the store is read: they failed with a traceback once the report was built."""
    from embinit.file_inputs import folder_problem

    problems = []
    for flag, value in (("--preamble", args.preamble), ("--epilogue", args.epilogue)):
        if value and not Path(value).is_file():
            problems.append(f"{flag}: {value!r} {'is not a file' if Path(value).exists() else 'does not exist'}")
    if args.out and Path(args.out).is_dir():
        problems.append(f"--out: {args.out!r} is a folder; give the markdown file's path "
                        f"(e.g. {args.out}/reproduction.md)")
    elif args.out and (why := folder_problem(Path(args.out).expanduser().parent, str(Path(args.out).parent))):
        problems.append(f"--out: cannot write {args.out!r}: {why}")
    if args.exports and (why := folder_problem(Path(args.exports).expanduser(), args.exports)):
        problems.append(f"--exports: {why}")
    return problems


def run(args) -> int:
    from embinit.errors import EmbinitError, ListedError
    from embinit.tracking.store_check import require_store
    from embinit.reproduction import Reproduction, render, write_exports
    from embinit.reproduction.frame import header
    from embinit.reproduction.inputs import PRESETS, choose_inputs

    if problems := file_problems(args):
        raise (EmbinitError(problems[0]) if len(problems) == 1 else
               ListedError(f"cannot write the reproduction ({len(problems)} problems):", problems))
    require_store(args.tracking_uri)
    name = choose_inputs(args.inputs, args.tracking_uri)
    rep = Reproduction(args.tracking_uri, PRESETS[name])
    sections = rep.build()
    pre = Path(args.preamble).read_text() if args.preamble else ""
    text = render(rep, sections, pre, header=header(rep, name))
    if args.epilogue:
        text += "\n" + Path(args.epilogue).read_text()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    if args.exports:
        for path in write_exports(rep, Path(args.exports)):
            print(f"wrote {path}")
    return 0
