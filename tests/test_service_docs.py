"""The requests docs/deployment.md shows, run as written (curl, from the repository root) against a
started server on the embedded defaults, with Ray and MLflow faked (`service.fakes`): the bundled
quickstart spec is accepted with the trial count the docs print."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from live_server import serving

from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.main import create_app
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "deployment.md").read_text()
pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="the docs' requests use curl")


def _five_requests() -> tuple[list[str], dict]:
    """The docs' curl commands (comments cut) and the 202 body they show for the POST."""
    block = DOC.split("## The API in five requests")[1].split("```bash")[1].split("```")[0]
    commands = [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("curl")]
    shown = re.search(r"^# 202 (\{.*)$", block, flags=re.M).group(1)
    fields = dict(re.findall(r'"(\w+)": ("[^"]*"|\d+)', shown))
    return commands, {k: json.loads(v) for k, v in fields.items()}


def _curl(command: str, base: str, exp_id: str | None = None) -> tuple[int, str]:
    command = command.replace("localhost:8000", base)
    if exp_id is not None:
        command = command.replace("3f2a...", exp_id)
    proc = subprocess.run(command + " -s -w '\\n%{http_code}'", shell=True, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    body, _, code = proc.stdout.rpartition("\n")
    return int(code), body


@pytest.fixture
def default_server(monkeypatch, tmp_path):
    """An `embinit serve` as a newcomer starts it: default settings, in the repository root."""
    for name in ("EMBINIT_DATA_ROOTS", "EMBINIT_PRETRAINED_ROOTS", "EMBINIT_TRACKING_URI",
                 "EMBINIT_API_TOKEN", "EMBINIT_MAX_TRIALS_PER_EXPERIMENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)
    settings = Settings(_env_file=None, database_url=f"sqlite:///{tmp_path}/state.db")
    cluster = FakeCluster()
    app = create_app(settings, runner=FakeRunner(cluster), store=FakeStore(cluster, settings.tracking_uri))
    with serving(app) as base:
        yield base, cluster


def test_the_docs_five_requests_work_on_the_bundled_quickstart(default_server):
    base, cluster = default_server
    commands, shown = _five_requests()
    assert len(commands) == 5 and "@tune_configs/quickstart.yaml" in commands[0]
    code, body = _curl(commands[0], base)
    assert code == 202, body
    submitted = json.loads(body)
    assert submitted["n_trials"] == shown["n_trials"] == 9  # 3 inits x 3 seeds
    assert submitted["status"] == shown["status"]
    # the driver gets the quickstart's vectors as an absolute path inside a pretrained root
    (sent,) = [s["spec"] for s in cluster.specs.values()]
    assert sent["pretrained"]["glove"] == str(ROOT / "tune_configs" / "data" / "synthetic_vectors.txt")
    expected = [200, 200, 200, 202]  # status, trials, results, cancel
    for command, want in zip(commands[1:], expected):
        code, body = _curl(command, base, submitted["id"])
        assert code == want, (command, body)


def test_the_default_roots_still_confine(default_server, tmp_path):
    base, _ = default_server
    outside = tmp_path / "vectors.txt"
    outside.write_text("the 0.1 0.2\n")
    spec = {"name": "outside", "tasks": ["synthetic_translation"], "inits": ["glove"], "seeds": 1,
            "pretrained": {"glove": str(outside)}}
    proc = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "-X", "POST", f"{base}/experiments",
                           "-H", "content-type: application/json", "--data-binary", json.dumps(spec)],
                          capture_output=True, text=True, timeout=60)
    body, _, code = proc.stdout.rpartition("\n")
    assert code == "422"
    (problem,) = json.loads(body)["detail"]
    assert problem["loc"] == "pretrained.glove" and "outside the allowed pretrained roots" in problem["msg"]


def test_invalid_yaml_body_keeps_line_and_column(default_server):
    base, _ = default_server
    body = "name: x\ntasks:\n  - task: synthetic_translation\n   epochs: 3\n"
    proc = subprocess.run(["curl", "-s", "-X", "POST", f"{base}/experiments", "-H", "content-type: application/yaml",
                           "--data-binary", body], capture_output=True, text=True, timeout=60)
    (problem,) = json.loads(proc.stdout)["detail"]
    assert problem["msg"].startswith("the body is not valid YAML at line 4, column 4: expected <block end>")
    assert "(while parsing a block collection at line 3, column 3)" in problem["msg"]


@pytest.mark.parametrize("page, script", [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")])
def test_api_docs_load_only_local_assets(default_server, page, script):
    """/docs and /redoc work offline: every script, stylesheet and icon they reference is served by the API
    itself (from the installed fastapi-offline package), none comes from a CDN."""
    import httpx
    base, _ = default_server
    html = httpx.get(base + page).text
    assert not re.search(r"(https?:)?//[\w.-]+\.\w+/", html), "the page names an outside host"
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any(a.endswith(script) for a in assets) and len(assets) >= 2
    for asset in assets:
        assert asset.startswith("/"), asset
        r = httpx.get(base + asset)
        assert r.status_code == 200 and len(r.content) > 1000, asset
        kind = asset.rsplit(".", 1)[-1]
        assert {"js": "javascript", "css": "text/css", "png": "image/png"}[kind] in r.headers["content-type"]
    assert "'/openapi.json'" in html or '"/openapi.json"' in html
    assert httpx.get(base + "/openapi.json").json()["info"]["title"] == "embinit"
