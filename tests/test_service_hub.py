"""A pretrained value that names no file under a root, submitted to a started server: a file-format
source never passes as a hub id; a Hugging Face id resolves from the local cache, else (online) from the
hub, a local stand-in here, and the answer says the trials will fetch it; offline, unknown or
unreachable it is a 422 at submit."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from live_server import free_port, serving

from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.main import create_app
from service.settings import Settings

KNOWN = "tiny-org/tiny-model"


def _spec(source: str, value: str) -> dict:
    return {"name": f"hub-{source}", "tasks": ["synthetic_translation"], "inits": [source], "seeds": 1,
            "pretrained": {source: value}}


@pytest.fixture
def submit(monkeypatch, tmp_path):
    pre = tmp_path / "pretrained"
    pre.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    settings = Settings(_env_file=None, database_url=f"sqlite:///{tmp_path}/state.db",
                        tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", pretrained_roots=[pre],
                        data_roots=[tmp_path / "data"])
    cluster = FakeCluster()
    app = create_app(settings, runner=FakeRunner(cluster), store=FakeStore(cluster, settings.tracking_uri))
    with serving(app) as base:
        yield lambda spec: httpx.post(base + "/experiments", json=spec, timeout=60)


@pytest.fixture
def online(monkeypatch):
    """No HF_HUB_OFFLINE, and a local stand-in for the hub's model API that knows one model."""
    import huggingface_hub.constants
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)

    class Hub(BaseHTTPRequestHandler):
        def do_GET(self):   # the model, at its main or its tag v1
            path = self.path.split("?")[0]
            known = path in (f"/api/models/{KNOWN}", f"/api/models/{KNOWN}/revision/v1")
            body = json.dumps({"id": KNOWN, "sha": "0" * 40} if known else {"error": "Repository not found"})
            self.send_response(200 if known else 404)
            if not known:
                revision = path.startswith(f"/api/models/{KNOWN}/revision/")
                self.send_header("X-Error-Code", "RevisionNotFound" if revision else "RepoNotFound")
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    yield
    server.shutdown()


def _problem(r: httpx.Response) -> dict:
    assert r.status_code == 422, r.text
    (problem,) = r.json()["detail"]
    return problem


@pytest.mark.parametrize("hub_offline", [True, False])
def test_a_bare_filename_is_never_a_hub_id(submit, monkeypatch, hub_offline):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if hub_offline else "0")
    problem = _problem(submit(_spec("glove", "synthetic_vectors.txt")))
    assert problem["loc"] == "pretrained.glove"
    assert "'synthetic_vectors.txt' is no file inside" in problem["msg"] and "not a hub id" in problem["msg"]


def test_offline_an_uncached_hub_id_is_refused(submit, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    problem = _problem(submit(_spec("hf", KNOWN)))
    assert problem["loc"] == "pretrained.hf" and "HF_HUB_OFFLINE is set" in problem["msg"]


def test_offline_a_cached_hub_id_is_accepted(submit, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = tmp_path / "hf-cache" / "models--tiny-org--tiny-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    r = submit(_spec("hf", KNOWN))
    assert r.status_code == 202, r.text
    assert r.json()["notices"] == [f"pretrained.hf: '{KNOWN}' is read from the Hugging Face cache of the "
                                   f"API's machine"]


def test_online_a_hub_id_is_looked_up_and_will_be_fetched(submit, online):
    r = submit(_spec("hf", KNOWN))
    assert r.status_code == 202, r.text
    (notice,) = r.json()["notices"]
    assert notice.startswith(f"pretrained.hf: '{KNOWN}' will be fetched from the Hugging Face hub")
    problem = _problem(submit(_spec("hf", "tiny-org/no-such-model")))
    assert "not a usable hub id: no such model on the Hugging Face hub" in problem["msg"]


def test_without_network_a_hub_id_is_refused(submit, online, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    problem = _problem(submit(_spec("hf", KNOWN)))
    assert "the Hugging Face hub cannot be reached" in problem["msg"]


def test_a_pinned_hub_id_resolves_at_its_revision(submit, monkeypatch, tmp_path):
    """`<id>@<revision>`: offline, accepted only where the cache has that revision (a commit's snapshot or
    a tag's ref); a pin without a revision is named."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = tmp_path / "hf-cache" / "models--tiny-org--tiny-model"
    for commit in ("a" * 40, "b" * 40):
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("b" * 40)
    (repo / "refs" / "v1").write_text("a" * 40)
    for pinned in (f"{KNOWN}@{'a' * 40}", f"{KNOWN}@v1"):
        r = submit(_spec("hf", pinned))
        assert r.status_code == 202, r.text
        assert r.json()["notices"] == [f"pretrained.hf: '{pinned}' is read from the Hugging Face cache of the "
                                       f"API's machine"]
    for absent in (f"{KNOWN}@{'c' * 40}", f"{KNOWN}@v2"):
        problem = _problem(submit(_spec("hf", absent)))
        assert f"'{absent}' is no file inside" in problem["msg"] and "HF_HUB_OFFLINE is set" in problem["msg"]
        # what the cache does hold of the model, so the pin can be corrected from the answer
        assert problem["msg"].endswith(f"; the cache holds {KNOWN} at main = {'b' * 40}, v1 = {'a' * 40}")
    problem = _problem(submit(_spec("bert", f"{KNOWN}@")))
    assert problem["loc"] == "pretrained.bert" and "nor a hub id" in problem["msg"]


def test_online_a_pinned_hub_id_is_looked_up_at_its_revision(submit, online):
    r = submit(_spec("hf", f"{KNOWN}@v1"))
    assert r.status_code == 202, r.text
    problem = _problem(submit(_spec("hf", f"{KNOWN}@v9")))
    assert "not a usable hub id: the model has no revision 'v9' on the Hugging Face hub" in problem["msg"]


def test_one_id_as_source_and_tokenizer_is_said_at_each_place(submit, monkeypatch, tmp_path):
    """A Hugging Face model is often both an init's source and the task's tokenizer: each notice names the
    field it was given in (before, both named the first one met, the tokenizer's, twice)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = tmp_path / "hf-cache" / "models--tiny-org--tiny-model" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("a" * 40)
    spec = {**_spec("hf", KNOWN), "tasks": [{"task": "synthetic_translation", "tokenizer": KNOWN}]}
    r = submit(spec)
    assert r.status_code == 202, r.text
    said = "is read from the Hugging Face cache of the API's machine"
    assert sorted(r.json()["notices"]) == [f"pretrained.hf: '{KNOWN}' {said}", f"tasks[0].tokenizer: '{KNOWN}' {said}"]
