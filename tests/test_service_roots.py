"""Where a submitted spec's files may lie, as the service says it (review finding B1): the bundled
quickstart posted to an API started outside the checkout is a 422 that names the roots as absolute paths
and the setting that moves them, offers no hub id for a GloVe file, and the API says its roots at start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from embinit.cli import serve
from service.fakes import FakeCluster
from service.settings import Settings

from helpers.service import app_clients, problems

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = yaml.safe_load((REPO / "tune_configs" / "quickstart.yaml").read_text())


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The API's working directory: a fresh folder, not the checkout (no `tune_configs/`, no `data/`)."""
    for name in ("EMBINIT_PRETRAINED_ROOTS", "EMBINIT_DATA_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _settings(tmp_path, **overrides) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                    refresh_interval_s=0.0, _env_file=None, **overrides)


def test_relative_roots_are_the_start_directory_s(elsewhere, monkeypatch):
    settings = Settings(_env_file=None)
    monkeypatch.chdir("/")   # a later working directory moves nothing
    assert settings.data_roots == [elsewhere / "data"]
    assert settings.pretrained_roots == [elsewhere / "pretrained", elsewhere / "tune_configs"]


def test_the_quickstart_outside_the_checkout_names_the_roots_and_the_setting(elsewhere):
    with app_clients(FakeCluster()) as open_client:
        found = problems(open_client(_settings(elsewhere)).post("/experiments", json=QUICKSTART))
    msg = found["pretrained.glove"]
    assert msg.startswith(f"'./data/synthetic_vectors.txt' is no file inside {elsewhere / 'pretrained'}, "
                          f"{elsewhere / 'tune_configs'} (setting EMBINIT_PRETRAINED_ROOTS)"), msg
    assert "a glove source is read from a file" in msg
    assert "hub id like" not in msg   # a glove source is a file, never a hub id


def test_started_with_the_checkout_s_tune_configs_the_quickstart_is_accepted(elsewhere):
    with app_clients(FakeCluster()) as open_client:
        client = open_client(Settings(database_url="sqlite:///state.db", refresh_interval_s=0.0, _env_file=None,
                                      pretrained_roots=[REPO / "tune_configs"]))   # the default store
        r = client.post("/experiments", json=QUICKSTART)
    assert r.status_code == 202, r.text
    assert r.json()["n_trials"] == 9


def test_a_data_dir_outside_the_roots_names_the_setting(elsewhere):
    (elsewhere / "data").mkdir()
    spec = {"name": "d", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1, "data_dir": "/etc"}
    with app_clients(FakeCluster()) as open_client:
        found = problems(open_client(_settings(elsewhere)).post("/experiments", json=spec))
    assert found["data_dir"] == (f"'/etc' is outside the allowed data roots {elsewhere / 'data'} "
                                 f"(setting EMBINIT_DATA_ROOTS)")


@pytest.mark.parametrize("source, value, hub", [
    ("glove", "org/vectors", False), ("npy", "vecs.npy", False), ("pretrained", "org/model", False),
    ("hf", "nowhere.txt!", True),
])
def test_only_a_hugging_face_source_is_offered_a_hub_id(elsewhere, source, value, hub):
    (elsewhere / "pretrained").mkdir()
    spec = {"name": "h", "tasks": ["synthetic_translation"], "inits": [source], "seeds": 1,
            "pretrained": {source: value}}
    with app_clients(FakeCluster()) as open_client:
        msg = problems(open_client(_settings(elsewhere)).post("/experiments", json=spec))[f"pretrained.{source}"]
    assert ("nor a hub id like 'org/model'" in msg) is hub, msg
    assert "(setting EMBINIT_PRETRAINED_ROOTS)" in msg


def test_an_init_s_own_pretrained_file_is_judged_by_its_source(elsewhere):
    (elsewhere / "pretrained").mkdir()
    spec = {"name": "i", "tasks": ["synthetic_translation"], "seeds": 1,
            "inits": [{"tgt": "glove", "pretrained": "org/vectors"}]}
    with app_clients(FakeCluster()) as open_client:
        msg = problems(open_client(_settings(elsewhere)).post("/experiments", json=spec))["inits[0].pretrained"]
    assert "a glove source is read from a file" in msg and "hub id like" not in msg, msg


def test_no_roots_says_the_setting_is_empty(elsewhere):
    spec = {"name": "e", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1, "data_dir": "d"}
    with app_clients(FakeCluster()) as open_client:
        found = problems(open_client(_settings(elsewhere, data_roots=[])).post("/experiments", json=spec))
    assert found["data_dir"] == "'d': this service accepts no data paths (no data roots: setting " \
                                "EMBINIT_DATA_ROOTS is empty)"


def test_the_api_says_its_roots_at_start(elsewhere, caplog, capsys):
    (elsewhere / "pretrained").mkdir()
    settings = _settings(elsewhere)
    with caplog.at_level(logging.INFO, logger="embinit.service"), app_clients(FakeCluster()) as open_client:
        open_client(settings)
    line = (f"data roots: {elsewhere / 'data'} (missing) (setting EMBINIT_DATA_ROOTS); pretrained roots: "
            f"{elsewhere / 'pretrained'}, {elsewhere / 'tune_configs'} (missing) (setting EMBINIT_PRETRAINED_ROOTS)")
    assert any(line in r.getMessage() for r in caplog.records), caplog.text
    serve._banner(type("Args", (), {"host": "127.0.0.1", "port": 8000}), settings)   # `embinit serve` prints it
    assert line in capsys.readouterr().out
