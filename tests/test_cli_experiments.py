"""`embinit experiments ...` against a started server running the real app (Ray and MLflow faked by
`service.fakes`): submit, list, status, results and cancel, with the token from --token or the
environment, and one-line errors for a missing token, an unknown id and an unreachable API."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from live_server import free_port, serving

from embinit.cli import main
from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.main import create_app
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "s3cret-token"


@pytest.fixture
def api(monkeypatch, tmp_path):
    for name in ("EMBINIT_API_URL", "EMBINIT_API_TOKEN", "EMBINIT_PRETRAINED_ROOTS", "EMBINIT_DATA_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)  # the default roots, as `embinit serve` in a clone has them
    settings = Settings(_env_file=None, database_url=f"sqlite:///{tmp_path}/state.db", api_token=TOKEN,
                        reads_require_token=True, refresh_interval_s=0.0)
    cluster = FakeCluster()
    runner = FakeRunner(cluster)
    app = create_app(settings, runner=runner, store=FakeStore(cluster, settings.tracking_uri))
    with serving(app) as base:
        yield base, runner


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["experiments", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_list_status_results_cancel(api, capsys):
    base, runner = api
    auth = ("--url", base, "--token", TOKEN)
    code, out, _ = cli(capsys, "submit", "tune_configs/quickstart.yaml", *auth)
    assert code == 0
    exp_id = re.search(r"submitted: (\w+) \(9 trials, queued\)", out).group(1)
    # the command it prints asks the API it was submitted to (--url), not the default one
    follow = re.search(r"follow it with `(.*)`", out).group(1)
    assert follow.endswith(f" experiments status {exp_id} --url {base}"), follow
    code, out, _ = cli(capsys, *shlex.split(follow)[2:], "--token", TOKEN)
    assert code == 0 and out.startswith(f"{exp_id}  quickstart  queued")

    code, out, _ = cli(capsys, "list", *auth)
    header, row = out.splitlines()
    assert header.split() == ["ID", "NAME", "STATUS", "TRIALS", "PROGRESS", "ETA", "CREATED"]
    assert row.split()[:5] == [exp_id, "quickstart", "queued", "0/9", "done"]

    runner.advance(f"embinit-exp-{exp_id}", "running", pending=4, running=2, finished=3)
    code, out, _ = cli(capsys, "status", exp_id, *auth)
    lines = out.splitlines()
    assert lines[0] == f"{exp_id}  quickstart  running"
    assert lines[1].startswith("  trials: 3/9 done (2 running), progress 33%, ETA ")
    assert "MLflow: experiment 'quickstart' in sqlite:///mlflow.db" in lines[2]

    code, out, _ = cli(capsys, "results", exp_id, "--format", "csv", *auth)
    assert code == 0 and out.splitlines()[0] == "task,init,n,mean"

    code, out, _ = cli(capsys, "cancel", exp_id, *auth)
    assert code == 0 and out.startswith(f"cancel requested for {exp_id}\n{exp_id}  quickstart  cancelled")
    code, out, _ = cli(capsys, "list", "--status", "cancelled", *auth)
    assert exp_id in out

    code, _, err = cli(capsys, "cancel", exp_id, *auth)  # twice: the API's 409, one line
    assert code == 2 and err.strip() == (f"embinit: error: DELETE {base}/experiments/{exp_id}: 409 "
                                         f"experiment {exp_id} is already cancelled")


def test_errors_are_one_line(api, capsys):
    base, _ = api
    code, _, err = cli(capsys, "list", "--url", base)
    assert code == 2 and "missing bearer token" in err and "pass --token or set EMBINIT_API_TOKEN" in err
    code, _, err = cli(capsys, "status", "nope", "--url", base, "--token", TOKEN)
    assert code == 2 and err.strip().endswith("404 experiment 'nope' not found")
    bad = Path("tune_configs/data/make_synthetic_vectors.py")  # not a spec: the API's 422, every problem
    code, _, err = cli(capsys, "submit", str(bad), "--url", base, "--token", TOKEN)
    assert code == 2 and ": 422 " in err and len(err.strip().splitlines()) == 1
    unused = f"http://127.0.0.1:{free_port()}"
    code, _, err = cli(capsys, "list", "--url", unused)
    assert code == 2 and f"cannot reach the embinit API at {unused}" in err and "embinit serve" in err


def test_a_refused_spec_s_problems_print_one_a_line(api, capsys, tmp_path):
    """The API's 422 lists each problem; the CLI printed them joined on one line of ~1,300 characters."""
    base, _ = api
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\ntasks: [synthetic_classification]\ninits: [xavier, glvoe]\nepocs: 3\n"
                    "defaults: {epochs: -2}\n")
    code, _, err = cli(capsys, "submit", str(spec), "--url", base, "--token", TOKEN)
    lines = err.splitlines()
    assert code == 2 and lines[0] == f"embinit: error: POST {base}/experiments: 422", err
    assert "  - inits[1]: 'glvoe' is not a registered init" in err and "  - epocs: unknown field 'epocs'" in err
    assert "\n  - defaults.epochs: Input should be greater than or equal to 1, got -2\n" in err
    assert all(line.startswith("  - ") for line in lines[1:]), err


def test_url_and_token_from_the_environment(api):
    base, _ = api
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EMBINIT_API_URL": base, "EMBINIT_API_TOKEN": TOKEN}
    proc = subprocess.run([sys.executable, "-m", "embinit", "experiments", "list", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"total": 0' in proc.stdout


def test_status_counts_say_what_an_ended_experiment_did_not_run():
    """Review M8: a failed experiment that lost its driver after 12 reused trials read `12/18 done (6 failed,
    12 reused)`, although none of the six ran; they are cancelled (docs/deployment.md, counts and progress)."""
    from embinit.cli.experiments import _counts
    exp = {"n_trials": 18, "counts": {"pending": 0, "running": 0, "finished": 0, "failed": 0, "reused": 12,
                                      "cancelled": 6}}
    assert _counts(exp) == "12/18 done (6 cancelled, 12 reused)"


@pytest.mark.parametrize("status, shown", [("running", "running  (cancel requested)"), ("cancelled", "cancelled"),
                                           ("succeeded", "succeeded")])
def test_status_says_cancel_requested_only_while_the_cancel_is_under_way(capsys, status, shown):
    """Review C4: a cancelled experiment printed `cancelled  (cancel requested)` after its cancel completed."""
    from embinit.cli.experiments import _print_status
    _print_status({"id": "abc", "name": "q", "status": status, "cancel_requested": True, "n_trials": 1,
                   "counts": {}, "progress": 0.0, "eta_s": None, "mlflow": {}})
    assert capsys.readouterr().out.splitlines()[0] == f"abc  q  {shown}"
