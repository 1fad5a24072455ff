"""What a spec author cannot reach (issue 20, security): MLflow artifacts outside the artifact root,
values beyond the declared bounds, hub-id-shaped values that are no hub ids. In-process fakes of Ray and
MLflow unless a test says otherwise; each refusal is a 422 naming the field, and stores nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from embinit import bounds, tracking
from embinit.errors import EmbinitError
from embinit.spec import SpecError, load_spec
from service.fakes import FakeCluster
from service.settings import Settings

from helpers.service import app_clients

SPEC = {"name": "sec", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}


@pytest.fixture
def make_client(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "pretrained").mkdir()
    values = dict(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                  data_roots=[tmp_path / "data"], pretrained_roots=[tmp_path / "pretrained"],
                  refresh_interval_s=0.0, _env_file=None)
    with app_clients(FakeCluster()) as open_client:
        yield lambda **overrides: open_client(Settings(**{**values, **overrides}))


@pytest.fixture
def client(make_client):
    return make_client()


def problems(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {p["loc"]: p["msg"] for p in response.json()["detail"]}


def nothing_stored(client) -> bool:
    return client.get("/experiments").json()["total"] == 0


# ---- 1: mlflow.experiment cannot place artifacts outside the artifact root ----------------------------

@pytest.mark.parametrize("name", ["../../outside/x", "a/b", "/tmp/x", "..", ".hidden"])
def test_the_mlflow_experiment_has_the_pattern_of_a_name(client, name):
    r = client.post("/experiments", json={**SPEC, "mlflow": {"experiment": name}})
    assert "should match pattern" in problems(r)["mlflow.experiment"]
    assert nothing_stored(client)


def test_tracking_refuses_an_artifact_location_outside_the_root(tmp_path):
    uri = f"sqlite:///{tmp_path}/store/m.db"
    with pytest.raises(EmbinitError, match="outside the artifact root"):
        tracking.ensure_experiment("../../outside/x", uri)
    assert not (tmp_path / "outside").exists()
    assert tracking.experiment_id("../../outside/x", uri) is None   # nothing was created
    exp = tracking.client(uri).get_experiment(tracking.ensure_experiment("fine.name", uri))
    assert exp.artifact_location == (tmp_path / "store" / "mlartifacts" / "fine.name").as_uri()


# ---- 4: bounds, declared once ---------------------------------------------------------------------------

@pytest.mark.parametrize("spec, loc, msg", [
    ({**SPEC, "defaults": {"max_len": 10**9}}, "defaults.max_len", "less than or equal to 1000000"),
    ({**SPEC, "retries": 10**6}, "retries", "less than or equal to 1000"),
    ({**SPEC, "seeds": [0, 2**32]}, "seeds[1]", "less than or equal to 4294967295"),
    ({**SPEC, "seeds": [-1]}, "seeds[0]", "greater than or equal to 0"),
    ({**SPEC, "defaults": {"data_seed": 2**40}}, "defaults.data_seed", "less than or equal to 4294967295"),
    ({**SPEC, "axes": {"lr": [1e-3, 1e300]}}, "axes.lr[1]", "less than or equal to 10"),
    ({**SPEC, "search": {"method": "optuna", "num_samples": 2,
                         "space": {"lr": {"low": 1e-300, "high": 1e300, "log": True}}}},
     "search.space.lr.low", "lr must be >= 1e-08, got 1e-300"),
    ({**SPEC, "search": {"method": "optuna", "num_samples": 2,
                         "space": {"lr": {"low": 1e-300, "high": 1e300, "log": True}}}},
     "search.space.lr.high", "lr must be <= 10"),
])
def test_values_beyond_the_declared_bounds_are_refused(client, spec, loc, msg):
    assert msg in problems(client.post("/experiments", json=spec))[loc]
    assert nothing_stored(client)
    with pytest.raises(SpecError) as e:   # the library (the CLI) refuses them too
        load_spec(spec)
    assert loc in dict(e.value.problems)


@pytest.mark.parametrize("spec, loc, msg", [
    ({**SPEC, "defaults": {"max_len": 100_000}}, "max_len", "100000 exceeds this service's limit of 8192 "
                                                            "(setting max_len)"),
    ({**SPEC, "retries": 50}, "retries", "50 exceeds this service's limit of 10 (setting max_retries)"),
    ({**SPEC, "axes": {"lr": [1e-3, 5.0]}}, "lr", "5 exceeds this service's limit of 1 (setting max_lr)"),
    ({**SPEC, "defaults": {"batch_size": 10**6}}, "batch_size", "(setting max_batch_size)"),
    ({**SPEC, "defaults": {"beam_size": 1000}}, "beam_size", "(setting max_beam_size)"),
])
def test_the_service_caps_them_further_with_its_settings(client, spec, loc, msg):
    assert msg in problems(client.post("/experiments", json=spec))[loc]
    assert nothing_stored(client)


def test_the_settings_come_from_the_one_table(make_client):
    settings = Settings(_env_file=None)
    for name, b in bounds.BOUNDS.items():
        if b.setting is not None:
            assert getattr(settings, b.setting) == b.default, name
    client = make_client(max_len=64, max_retries=1)
    r = client.post("/experiments", json={**SPEC, "defaults": {"max_len": 65}, "retries": 2})
    assert problems(r) == {"max_len": "65 exceeds this service's limit of 64 (setting max_len)",
                           "retries": "2 exceeds this service's limit of 1 (setting max_retries)"}


def test_the_trainer_checks_the_same_bounds():
    from embinit.config import TrialConfig
    from embinit.train.prepare import check_config
    with pytest.raises(EmbinitError) as e:
        check_config(TrialConfig(task="synthetic_lm", seed=2**32, max_len=10**9, lr=1e300))
    msg = str(e.value)
    assert "seed must be <= 4294967295" in msg and "got 4294967296" in msg
    assert "max_len must be <= 1000000" in msg and "lr must be <= 10" in msg
    with pytest.raises(EmbinitError, match="epochs must be >= 1, got 0"):
        check_config(TrialConfig(task="synthetic_lm", epochs=0))


def test_bounds_are_declared_once():
    """No module but embinit/bounds.py spells the bounds' numbers out next to their setting names."""
    root = Path(__file__).resolve().parents[1]
    settings = (root / "service" / "settings.py").read_text()
    for b in bounds.BOUNDS.values():
        if b.setting:
            assert f"{b.setting}: int = {b.default}" not in settings and f"{b.setting}: float = " \
                   f"{b.default}" not in settings
