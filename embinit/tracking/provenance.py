"""How a sweep was run, recorded on its MLflow run so documents can say it from the record (issue 22
item 6): the command line, the machine (CPU model and count), the embinit version and the git commit of
the code. The date is the run's start time; the spec is its `spec.yaml` artifact; the device is each
trial's `embinit.device` tag. `read(run)` gives them back, "not recorded" for sweeps older than this.

What a trial's worker ran, recorded on the trial's own run (embinit.tracking.trial_run): `process_commit()` (the
commit of the code this process imported) and `library_versions()`; both asked once per process.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

COMMAND_TAG, MACHINE_TAG = "embinit.command", "embinit.machine"
VERSION_TAG, COMMIT_TAG = "embinit.version", "embinit.git_commit"
SOURCE_COMMIT_ENV = "EMBINIT_GIT_COMMIT"   # the commit of a copied tree that has no .git
TAGS = {"command": COMMAND_TAG, "machine": MACHINE_TAG, "version": VERSION_TAG, "commit": COMMIT_TAG}
NOT_RECORDED = "not recorded"
UNKNOWN_COMMIT = "unknown"   # in a trial's list of commits: an attempt outside a git checkout
VERSIONED = ("torch", "numpy", "sacrebleu", "spacy", "mlflow")   # spacy left out where not installed


def cpu_model() -> str:
    """The CPU's model name as `lscpu` shows it (from /proc/cpuinfo), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine() -> str:
    """`AMD EPYC 7B13, 2 CPUs, Linux x86_64`: what the driver of a sweep ran on."""
    return f"{cpu_model()}, {os.cpu_count() or '?'} CPUs, {platform.system()} {platform.machine()}"


def git_commit(where: Path | None = None) -> str | None:
    """The commit of the checkout embinit is imported from (`-dirty` when files differ from it), or None
    for an installed package outside a git checkout. $EMBINIT_GIT_COMMIT, when set, is the answer: it
    names the commit of a source tree copied elsewhere (a GPU machine's copy, bench/gpu_stretch.sh), whose
    `.git`, if one came along, may be another commit's (the device tool's copy carried the session's
    first commit, so runs there read `<that>-dirty`)."""
    named = os.environ.get(SOURCE_COMMIT_ENV, "").strip()
    if named:
        return named
    where = where or Path(__file__).resolve().parents[2]   # the checkout: embinit/tracking/ is two below
    if not (where / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode:
            return None
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


@functools.cache
def process_commit() -> str | None:
    """`git_commit()` asked once per process: a worker runs the modules it imported when it started,
    whatever HEAD became since (Ray reuses its actors across trials), and a trial pays no `git` call."""
    return git_commit()


def commits_trained(previous: str | None, commit: str | None) -> str | None:
    """The comma-separated list of every commit that trained a run (`previous`, as tagged) with `commit`
    appended when it is new: a run resumed by other code shows both. Outside a git checkout (`commit`
    None) an attempt of unknown code adds `unknown` to a list that has entries, and starts none."""
    seen = [c for c in (previous or "").split(",") if c]
    entry = commit or (UNKNOWN_COMMIT if seen else None)
    if entry is not None and entry not in seen:
        seen.append(entry)
    return ",".join(seen) or None


def ray_node() -> str | None:
    """The address of this process's Ray node when it is connected to Ray (a trial's worker), else None.
    Never imports Ray: a process that has not, is not connected."""
    ray = sys.modules.get("ray")
    return ray.util.get_node_ip_address() if ray is not None and ray.is_initialized() else None


@functools.cache
def library_versions() -> str:
    """JSON of the versions a trial's numbers depend on: python, torch (its build tag names the CUDA
    it was built for), numpy, sacrebleu, spacy, mlflow and embinit. A module already imported gives its
    own `__version__` (the code that runs); else the installed distribution's, without importing it."""
    from importlib import metadata

    from embinit import __version__
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        version = getattr(sys.modules.get(name), "__version__", None)
        if version is None:
            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        out[name] = str(version)
    out["embinit"] = __version__
    return json.dumps(out, sort_keys=True)


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed (`embinit run SPEC epochs=2`), or the program that called `run_sweep`; a
    password in a URL argument (`--tracking-uri postgresql://user:PASSWORD@...`, `mlflow.tracking_uri=...`)
    and the value of a secret flag (`--redis-password=...`, which every Ray worker's command line holds
    on a cluster with a Redis password) are masked: the tag is shown in MLflow's UI and in the
    reproduction document."""
    argv = _masked_argv(sys.argv if argv is None else argv)
    if not argv:
        return "run_sweep()"
    prog = Path(argv[0]).name
    if prog == "embinit" or argv[0].endswith(("embinit/__main__.py", "embinit/cli/__init__.py")):
        return shlex.join(["embinit", *argv[1:]])
    return f"run_sweep() called from {shlex.join([prog, *argv[1:]])}"[:1000]


def _masked_argv(argv: list[str]) -> list[str]:
    """`argv` with each word's secrets hidden (`embinit.redact.masked_arg`), and the word after a secret
    flag given apart (`--password PW`)."""
    from embinit.redact import HIDDEN, is_secret_flag, masked_arg
    return [HIDDEN if i and is_secret_flag(argv[i - 1]) else masked_arg(a) for i, a in enumerate(argv)]


def collect(argv: list[str] | None = None) -> dict[str, str]:
    """The tags of a sweep run started now, in this process."""
    from embinit import __version__
    return {COMMAND_TAG: command_line(argv), MACHINE_TAG: machine(), VERSION_TAG: __version__,
            COMMIT_TAG: git_commit() or NOT_RECORDED + " (not a git checkout)"}


def record(run_id: str, uri: str, tags: dict[str, str] | None = None) -> None:
    """Tag the sweep run `run_id` with how it is run (`collect()` unless `tags` are given)."""
    from embinit.tracking import mlflow_store
    c = mlflow_store.client(uri)
    for name, value in (tags or collect()).items():
        mlflow_store.retry(lambda n=name, v=value: c.set_tag(run_id, n, v))


def read(tags: dict[str, str]) -> dict[str, str]:
    """{command, machine, version, commit} from a run's tags (a record's `tags`), "not recorded" where
    it lacks one."""
    return {field: tags.get(tag) or NOT_RECORDED for field, tag in TAGS.items()}
