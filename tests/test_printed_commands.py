"""Every command embinit prints or documents runs as printed after `make run` (issue 22 item 8), where
`embinit` and `mlflow` live in `.venv/bin` only: the printed next steps of a run are run here in a
shell whose PATH lacks the interpreter's scripts folder, and the docs' code blocks name `.venv/bin/`."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from embinit import commands
from embinit.tracking import mlflow_store, trial_run
from embinit.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = commands.scripts_dir()
needs_scripts = pytest.mark.skipif(not (SCRIPTS / "embinit").exists() or not (SCRIPTS / "mlflow").exists(),
                                   reason="embinit/mlflow are not installed as scripts of this interpreter")
BARE_PATH = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                            if p and Path(p).resolve() != SCRIPTS.resolve())   # venv not activated


@needs_scripts
def test_program_is_the_scripts_path_unless_path_finds_it(monkeypatch):
    monkeypatch.setenv("PATH", BARE_PATH)
    monkeypatch.chdir(SCRIPTS.parent.parent)          # the checkout holding .venv
    relative = str(Path(SCRIPTS.parent.name) / SCRIPTS.name / "embinit")
    assert commands.program("embinit") == (relative if SCRIPTS.parent.parent != Path("/") else
                                           str(SCRIPTS / "embinit"))
    monkeypatch.chdir("/")
    assert commands.program("mlflow") == str(SCRIPTS / "mlflow")
    monkeypatch.setenv("PATH", f"{SCRIPTS}{os.pathsep}{BARE_PATH}")   # activated: the bare name runs
    assert commands.program("embinit") == "embinit"
    assert commands.program("no-such-program") == "no-such-program"


def _store(tmp_path) -> str:
    (tmp_path / "store").mkdir()
    uri = f"sqlite:///{tmp_path}/store/mlflow.db"   # not the default ./mlflow.db: the command names it
    exp = mlflow_store.ensure_experiment("demo", uri)
    cfg = {"task": "synthetic_classification", "init": "xavier", "seed": 0, "epochs": 2}
    run = trial_run.TrialRun.open(uri, exp, None, cfg, "k0", "Xavier", {"axes": {}, "point": {}})
    for epoch in (1, 2):
        run.log_epoch(epoch, {"val/loss": 1.0 / epoch, "val/acc": 0.5 + epoch / 10})
    run.finish({"status": "finished", "history": [], "test": {}, "best": {"val/acc": 0.7, "val/loss": 0.5},
                "best_epoch": 2}, [])
    return uri


@pytest.mark.slow   # an MLflow store, and the printed commands in subprocesses
@needs_scripts
def test_a_runs_printed_next_steps_run_as_printed(tmp_path, monkeypatch, capsys):
    import embinit.sweep
    from embinit.sweep.run import SweepResult
    uri = _store(tmp_path)
    monkeypatch.setattr(embinit.sweep, "run_sweep", lambda spec, **kw: SweepResult(
        "demo", "1", "p", uri, planned=1, reused=0, trials=[{"status": "finished"}], wall_s=1.0))
    monkeypatch.setenv("PATH", BARE_PATH)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(ROOT / "tune_configs" / "quickstart.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    steps = [ln.split("#")[0].strip() for ln in out[out.index("next steps:") + 1:]]
    report, ui = steps
    assert "report demo --plot plots/ --tracking-uri" in report and "ui --backend-store-uri" in ui
    env = {**os.environ, "PATH": BARE_PATH, "PYTHONPATH": str(ROOT)}
    elsewhere = tmp_path / "elsewhere"     # not the run's directory: the command names its store
    elsewhere.mkdir()
    done = subprocess.run(["bash", "-c", report], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "| Xavier |" in done.stdout and list((elsewhere / "plots").glob("*.png"))
    # the UI command: its program and subcommand as printed (not left serving)
    words = shlex.split(ui)
    assert words[words.index("--port") + 1] == str(commands.UI_PORT)
    done = subprocess.run(words[:2] + ["--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "--backend-store-uri" in done.stdout


def test_next_steps_name_the_default_store_too(tmp_path, monkeypatch):
    """A run on the default ./mlflow.db prints its absolute URI: the report command runs from anywhere."""
    monkeypatch.chdir(tmp_path)
    steps = commands.next_steps("demo", mlflow_store.resolve_uri(None))
    assert shlex.split(steps[1].split("#")[0])[-2:] == ["--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]


def test_the_printed_ui_address_is_the_experiments_run_table(tmp_path, monkeypatch):
    """MLflow 3.17's UI opens an experiment at its bare address (or clicked in the list) on the GenAI
    overview (traces, token usage), kind tag or not: the address printed after a sweep is its run table."""
    monkeypatch.chdir(tmp_path)
    steps = commands.next_steps("demo", mlflow_store.resolve_uri(None), experiment_id="3")
    assert steps[2].endswith(f"# then open http://127.0.0.1:{commands.UI_PORT}/#/experiments/3/runs")
    assert commands.ui_command("http://mlflow:5000/", experiment_id="3") == \
        "open http://mlflow:5000/#/experiments/3/runs (the MLflow server)"
    assert commands.ui_command("http://mlflow:5000") == "open http://mlflow:5000 (the MLflow server)"


@pytest.mark.parametrize("doc", ["README.md", "docs/deployment.md"])
def test_documented_commands_name_the_venv(doc):
    """In the docs' shell blocks, `embinit`/`mlflow` are called as `make run` installs them."""
    text = (ROOT / doc).read_text()
    blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", text, flags=re.S)
    lines = [ln.strip() for b in blocks for ln in b.splitlines()]
    calls = [ln for ln in lines if re.match(r"(\S*/)?(embinit|mlflow) ", ln)]
    assert calls, doc
    assert [ln for ln in calls if not ln.startswith(".venv/bin/")] == []


@needs_scripts
def test_the_serve_banners_ui_command_runs_as_printed(tmp_path, monkeypatch, capsys):
    import uvicorn
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)    # no server: only the banner
    for name in ("EMBINIT_RAY_ADDRESS", "EMBINIT_TRACKING_URI", "EMBINIT_DATABASE_URL", "EMBINIT_MLFLOW_UI_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", BARE_PATH)
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--port", "8123"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("MLflow UI: "))
    words = shlex.split(line.removeprefix("MLflow UI: ").split("#")[0])
    assert words[1:] == ["ui", "--backend-store-uri", "sqlite:///mlflow.db", "--port", str(commands.UI_PORT)]
    env = {**os.environ, "PATH": BARE_PATH}
    done = subprocess.run(words[:2] + ["--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--backend-store-uri" in done.stdout


SECRET = "postgresql+psycopg://mlflow:s3cret@db:5432/mlflow"


def expanded(line: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """What bash hands the program of a printed command line (`printf` in its place) under `env` only."""
    text = line.split("   #")[0].strip()
    args = text[len(shlex.quote(shlex.split(text)[0])):]
    return subprocess.run(["bash", "-c", f"printf '%s\\n' {args}"], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=60)


def test_a_stores_password_is_never_printed_and_the_commands_read_it_from_the_environment():
    """A password printed stays in the terminal, the logs and the shell's history: the next steps name the
    store by `$EMBINIT_TRACKING_URI`, run as printed once it is set, and refuse to run (rather than open
    another store) while it is not."""
    steps = commands.next_steps("demo", SECRET)
    assert not [s for s in steps if "s3cret" in s]
    assert steps[-1] == ("  # set $EMBINIT_TRACKING_URI to postgresql+psycopg://mlflow:***@db:5432/mlflow, with "
                         "the password (not printed), first")
    report, ui = steps[1:3]
    assert "report demo --plot plots/ --tracking-uri" in report and "ui --backend-store-uri" in ui
    for line in (report, ui):
        done = expanded(line, {"EMBINIT_TRACKING_URI": SECRET})
        assert done.returncode == 0 and SECRET in done.stdout.splitlines(), done
        unset = expanded(line, {})
        assert unset.returncode != 0 and "EMBINIT_TRACKING_URI: " + commands.UNSET in unset.stderr


def test_a_server_url_with_a_password_is_shown_masked():
    assert commands.ui_command("http://me:s3cret@mlflow:5000") == "open http://me:***@mlflow:5000 (the MLflow server)"


def test_the_serve_banner_shows_no_password(tmp_path, monkeypatch, capsys):
    import uvicorn

    import service.main
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    from types import SimpleNamespace
    lease = SimpleNamespace(acquire=lambda: None, release=lambda: None)   # no database is opened
    runner = SimpleNamespace(connect=lambda: None)                        # nor a Ray cluster joined
    app = SimpleNamespace(state=SimpleNamespace(lease=lease, runner=runner))
    monkeypatch.setattr(service.main, "create_app", lambda settings: app)
    monkeypatch.setenv("EMBINIT_TRACKING_URI", SECRET)
    monkeypatch.setenv("EMBINIT_DATABASE_URL", "postgresql+psycopg://api:s3cret2@db/state")
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--port", "8123", "--ray-address", "ray://head:10001"]) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out, out
    assert "state database: postgresql+psycopg://api:***@db/state   MLflow store: " \
           "postgresql+psycopg://mlflow:***@db:5432/mlflow" in out
    ui = next(ln for ln in out.splitlines() if ln.startswith("MLflow UI: "))
    assert SECRET in expanded(ui.removeprefix("MLflow UI: "), {"EMBINIT_TRACKING_URI": SECRET}).stdout


def test_the_readmes_next_steps_are_what_the_quickstart_prints(tmp_path, monkeypatch):
    """The README shows `make run`'s next steps from the repository root: each line is the printed one
    with the store written relative (the quickstart's experiment is the first in a new store: id 1)."""
    monkeypatch.chdir(tmp_path)
    printed = commands.next_steps("quickstart", mlflow_store.resolve_uri(None), experiment_id="1")[1:]
    readme = (ROOT / "README.md").read_text().split("from the repository root they are:")[1]
    shown = readme.split("```bash\n")[1].split("```")[0].splitlines()
    relative = [re.sub(r"\S*/bin/", ".venv/bin/", ln.strip()).replace(f"sqlite:///{tmp_path}/", "sqlite:///")
                for ln in printed]
    for line, want in zip(shown, relative, strict=True):
        command, _, comment = line.partition("#")
        if comment.strip().startswith("then open"):     # the UI line: the command and the address it prints
            assert line.split() == want.split(), line
        else:                                            # the report: the command without its store flag
            assert want.split()[:-2] == command.split(), line
