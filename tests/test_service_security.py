"""What a spec author cannot reach (issue 20, security): MLflow artifacts outside the artifact root,
values beyond the declared bounds, hub-id-shaped values that are no hub ids. In-process fakes of Ray and
MLflow unless a test says otherwise; each refusal is a 422 naming the field, and stores nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from embinit import bounds
from embinit.tracking import mlflow_store
from embinit.errors import EmbinitError
from embinit.spec import SpecError, load_spec
from service.fakes import FakeCluster
from service.settings import Settings

from helpers.service import nothing_stored, problems, rooted_clients

SPEC = {"name": "sec", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}


@pytest.fixture
def make_client(tmp_path):
    with rooted_clients(tmp_path, FakeCluster()) as open_client:
        yield open_client


@pytest.fixture
def client(make_client):
    return make_client()


# ---- 1: mlflow.experiment cannot place artifacts outside the artifact root ----------------------------

@pytest.mark.parametrize("name", ["../../outside/x", "a/b", "/tmp/x", "..", ".hidden"])
def test_the_mlflow_experiment_has_the_pattern_of_a_name(client, name):
    r = client.post("/experiments", json={**SPEC, "mlflow": {"experiment": name}})
    assert "should match pattern" in problems(r)["mlflow.experiment"]
    assert nothing_stored(client)


def test_tracking_refuses_an_artifact_location_outside_the_root(tmp_path):
    uri = f"sqlite:///{tmp_path}/store/m.db"
    with pytest.raises(EmbinitError, match="outside the artifact root"):
        mlflow_store.ensure_experiment("../../outside/x", uri)
    assert not (tmp_path / "outside").exists()
    assert mlflow_store.experiment_id("../../outside/x", uri) is None   # nothing was created
    exp = mlflow_store.client(uri).get_experiment(mlflow_store.ensure_experiment("fine.name", uri))
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


def test_a_seed_count_is_bounded_before_its_list_is_built():
    with pytest.raises(SpecError) as e:   # the service refuses it earlier still, as too many trials
        load_spec({**SPEC, "seeds": 10**9})
    assert "seed_count must be <= 100000" in dict(e.value.problems)["seeds"]


@pytest.mark.parametrize("spec, loc, msg", [
    ({**SPEC, "defaults": {"max_len": 100_000}}, "defaults.max_len", "100000 exceeds this service's limit of 8192 "
                                                            "(setting max_len)"),
    ({**SPEC, "retries": 50}, "retries", "50 exceeds this service's limit of 10 (setting max_retries)"),
    ({**SPEC, "axes": {"lr": [1e-3, 5.0]}}, "axes.lr[1]", "5 exceeds this service's limit of 1 (setting max_lr)"),
    ({**SPEC, "defaults": {"batch_size": 10**6}}, "defaults.batch_size", "(setting max_batch_size)"),
    ({**SPEC, "defaults": {"beam_size": 1000}}, "defaults.beam_size", "(setting max_beam_size)"),
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
    assert problems(r) == {"defaults.max_len": "65 exceeds this service's limit of 64 (setting max_len)",
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


# ---- 6: hub-id-shaped tokenizer, init_from and reference values ------------------------------------------

@pytest.fixture
def offline_hub(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))   # empty: nothing is cached


@pytest.mark.parametrize("spec, loc, msg", [
    ({**SPEC, "defaults": {"tokenizer": "some-org/some-tokenizer"}}, "defaults.tokenizer",
     "not in the local Hugging Face cache, and HF_HUB_OFFLINE is set"),
    ({**SPEC, "tasks": [{"task": "synthetic_translation", "tokenizer": "sometok"}]}, "tasks[0].tokenizer",
     "not in the local Hugging Face cache"),
    ({**SPEC, "axes": {"tokenizer": ["whitespace", "org/tok"]}}, "axes.tokenizer[1]",
     "not in the local Hugging Face cache"),
    ({**SPEC, "tasks": [{"task": "synthetic_translation", "tokenizer": "spacey"}]}, "tasks[0].tokenizer",
     "nor a tokenizer name: 'spacey' is not a registered tokenizer; choose from ['auto', 'gpt2', 'spacy', "
     "'whitespace']; did you mean 'spacy'?"),
    ({**SPEC, "defaults": {"tokenizer": "spacy!"}}, "defaults.tokenizer",
     "nor a hub id like 'org/model'; did you mean 'spacy'?"),
    ({**SPEC, "defaults": {"init_from": "org/checkpoint"}}, "defaults.init_from",
     "'org/checkpoint' is no file inside"),
    ({**SPEC, "defaults": {"init_from": "best.pt"}}, "defaults.init_from", "'best.pt' is no file inside"),
    ({**SPEC, "analyses": {"similarity": {"reference": "org/model"}}}, "analyses.similarity.reference",
     "nor an MLflow run id (32 hex digits)"),
])
def test_hub_id_shaped_values_are_checked(client, offline_hub, spec, loc, msg):
    found = problems(client.post("/experiments", json=spec))
    assert msg in found[loc], found
    assert nothing_stored(client)


def test_what_those_fields_may_name_instead(client, offline_hub, tmp_path):
    import torch
    torch.save({"tok": torch.zeros(1)}, tmp_path / "pretrained" / "best.pt")   # b"x" is no checkpoint: a 422 now
    for spec in ({**SPEC, "defaults": {"tokenizer": "whitespace"}},
                 {**SPEC, "axes": {"tokenizer": ["spacy", "whitespace"]}},
                 {**SPEC, "defaults": {"init_from": "best.pt"}},
                 {**SPEC, "analyses": {"similarity": {"reference": "0123456789abcdef" * 2}}}):
        r = client.post("/experiments", json=spec)
        assert r.status_code == 202, (spec, r.text)
    stored = client.get(r.json()["status_url"]).json()["spec"]
    assert stored["analyses"]["similarity"]["reference"] == "0123456789abcdef" * 2


def test_a_cached_tokenizer_id_is_accepted(client, offline_hub, tmp_path):
    snapshot = tmp_path / "hf-cache" / "models--org--tok" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer_config.json").write_text("{}")
    (tmp_path / "hf-cache" / "models--org--tok" / "refs").mkdir()
    (tmp_path / "hf-cache" / "models--org--tok" / "refs" / "main").write_text("0" * 40)
    r = client.post("/experiments", json={**SPEC, "defaults": {"tokenizer": "org/tok"}})
    assert r.status_code == 202, r.text
    assert any("'org/tok' is read from the Hugging Face cache" in n for n in r.json()["notices"])


# ---- 2: a symlink swapped into a root after the 202 ------------------------------------------------------

class _Marker:
    """Unpickling it creates a file: proof that a pickle's code ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _swap(folder: Path, outside: Path) -> None:
    """Replace a root's folder by a symlink to `outside` (what a user who can write in a root could do
    between the submit and the trial)."""
    folder.rename(folder.with_name(folder.name + ".old"))
    folder.symlink_to(outside, target_is_directory=True)


def _roots(monkeypatch, tmp_path) -> None:
    from embinit.trusted import TRUSTED_ROOTS_ENV
    monkeypatch.setenv(TRUSTED_ROOTS_ENV, f"{tmp_path / 'data'}:{tmp_path / 'pretrained'}")
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "own-cache"))


def test_a_reference_swapped_after_the_202_is_never_unpickled(client, tmp_path, monkeypatch):
    import torch
    from embinit.analysis.sources import load_embeddings
    (tmp_path / "pretrained" / "ref").mkdir()
    (tmp_path / "pretrained" / "ref" / "best.pt").write_bytes(b"x")
    r = client.post("/experiments", json={**SPEC, "analyses": {"similarity": {"reference": "ref/best.pt"}}})
    assert r.status_code == 202, r.text
    reference = client.get(r.json()["status_url"]).json()["spec"]["analyses"]["similarity"]["reference"]
    outside, marker = tmp_path / "outside", tmp_path / "code-ran"
    outside.mkdir()
    torch.save({"embeddings": {"tgt": _Marker(marker)}}, outside / "best.pt")
    _swap(tmp_path / "pretrained" / "ref", outside)
    _roots(monkeypatch, tmp_path)
    with pytest.raises(EmbinitError, match="outside the trusted roots"):
        load_embeddings(reference)
    assert not marker.exists()


def test_the_checkpoint_reader_never_runs_code_even_inside_the_roots(tmp_path, monkeypatch):
    import torch
    from embinit.train import checkpoint
    from embinit.train.prepare import load_body
    marker = tmp_path / "code-ran"
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "best.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "config": _Marker(marker)}, path)
    _roots(monkeypatch, tmp_path)
    for load in (checkpoint.load_best, lambda p: checkpoint.load_last(p.parent, "k"),
                 lambda p: load_body(torch.nn.Linear(2, 2), str(p))):
        if load is not checkpoint.load_best:
            (tmp_path / "data" / "last.pt").write_bytes(path.read_bytes())
        with pytest.raises(EmbinitError, match="cannot read"):
            load(path)
        assert not marker.exists()


def test_knn_snapshots_are_not_written_through_a_swapped_folder(client, tmp_path, monkeypatch):
    from embinit.config import TrialConfig
    from embinit.spec import load_spec
    from embinit.sweep.analyses import shared_settings, trial_callbacks
    from embinit.train import run_trial
    r = client.post("/experiments", json={**SPEC, "analyses": {"similarity": {"snapshot_dir": "snaps",
                                                                              "every_n_steps": 1}}})
    assert r.status_code == 202, r.text
    spec = load_spec(client.get(r.json()["status_url"]).json()["spec"])
    (tmp_path / "data" / "snaps").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    _swap(tmp_path / "data" / "snaps", outside)
    _roots(monkeypatch, tmp_path)
    settings = shared_settings(spec)   # in the driver, after the swap
    cfg = TrialConfig(task="synthetic_lm", epochs=1, max_train_examples=16, d_model=16, layers=1, ff_dim=16)
    callbacks = trial_callbacks(settings, cfg, lambda metrics, step: None, tmp_path / "data" / "trial")
    with pytest.raises(EmbinitError, match="KNN snapshot folder .* outside the trusted roots"):
        run_trial(cfg, out_dir=tmp_path / "data" / "trial", callbacks=callbacks, cache_dir=False)
    assert list(outside.iterdir()) == []


def test_a_cache_dir_swapped_after_the_202_gets_nothing_written(client, tmp_path, monkeypatch):
    from embinit import content_hash
    from embinit.spec import load_spec
    from embinit.sweep import run_sweep
    r = client.post("/experiments", json={**SPEC, "cache_dir": "cache"})
    assert r.status_code == 202, r.text
    spec = load_spec(client.get(r.json()["status_url"]).json()["spec"])
    (tmp_path / "data" / "cache").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    _swap(tmp_path / "data" / "cache", outside)
    _roots(monkeypatch, tmp_path)
    uri = f"sqlite:///{tmp_path}/m.db"
    with pytest.raises(EmbinitError, match="Tune's storage folder .* outside the trusted roots"):
        run_sweep(spec, tracking_uri=uri, progress=False)   # refused before Ray, MLflow or Tune start
    with content_hash.entry_lock(Path(spec.cache_dir) / "tasks" / "entry.pkl"):   # the build lock
        pass
    (tmp_path / "pretrained" / "v.txt").write_text("a 1 2\n")
    assert len(content_hash.file_digest(tmp_path / "pretrained" / "v.txt", spec.cache_dir)) == 64  # no memo
    assert list(outside.iterdir()) == []


def test_an_optuna_range_beyond_a_fields_own_constraint_is_refused():
    with pytest.raises(SpecError) as e:
        load_spec({**SPEC, "search": {"method": "optuna", "num_samples": 2,
                                      "space": {"dropout": {"low": 0.1, "high": 5.0}}}})
    problems_found = dict(e.value.problems)
    assert "dropout must be < 1" in problems_found["search.space.dropout.high"], problems_found   # embinit.bounds
    assert "search.space.dropout.low" not in problems_found


# ---- 3: the local Ray's options (the listening sockets themselves: tests/test_service_listen.py) -----------

def test_local_ray_options_hold_only_while_the_local_ray_starts(monkeypatch):
    from ray._private import ray_constants
    from embinit.sweep.ray_runtime import NO_CLUSTER_ENV, local_ray_options
    monkeypatch.delenv(NO_CLUSTER_ENV, raising=False)
    before = ray_constants.ENABLE_RAY_CLUSTER
    with local_ray_options() as options:
        assert options == {"_node_ip_address": "127.0.0.1", "include_dashboard": False}
        assert os.environ[NO_CLUSTER_ENV] == "0" and ray_constants.ENABLE_RAY_CLUSTER is False
    assert NO_CLUSTER_ENV not in os.environ and ray_constants.ENABLE_RAY_CLUSTER == before


def test_a_checkpoint_folder_swapped_after_its_check_gets_no_lock_file(tmp_path, monkeypatch):
    """The claim checks its folder, creates it, then resolves it again as it writes the lock: a swap that
    lands between the two (simulated by letting the first check pass) still writes nothing outside."""
    from embinit.sweep import resume
    from embinit.sweep.work import SweepContext
    (tmp_path / "data" / "cache").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    _roots(monkeypatch, tmp_path)
    ctx = SweepContext("sqlite:///m.db", "1", "parent", cache_dir=str(tmp_path / "data" / "cache"))
    _swap(tmp_path / "data" / "cache", outside)
    monkeypatch.setattr(resume, "is_trusted", lambda path: True)   # the check made before the swap
    with pytest.raises(EmbinitError, match="checkpoint folder .* outside the trusted roots"):
        with resume.claim(ctx, "k"):
            pass
    assert not list(outside.rglob("*.lock"))


def test_a_tracking_databases_password_is_not_shown_to_the_apis_readers():
    """EMBINIT_TRACKING_URI may be a database URL with its password (a store written directly): every
    experiment's `mlflow.tracking_uri` carries it to any client; the service keeps it."""
    from service.db import Experiment
    from service.settings import Settings
    from service.views import mlflow_link
    exp = Experiment(id="e1", tracking_uri="postgresql+psycopg://mlflow:s3cret@db:5432/mlflow",
                     mlflow_experiment="x", mlflow_experiment_id="7")
    link = mlflow_link(exp, Settings(_env_file=None))
    assert link.tracking_uri == "postgresql+psycopg://mlflow:***@db:5432/mlflow"
    ui = mlflow_link(exp, Settings(_env_file=None, mlflow_ui_url="http://127.0.0.1:5000/")).url
    assert ui == "http://127.0.0.1:5000/#/experiments/7/runs"   # the run table: MLflow 3's bare link is GenAI's
    assert exp.tracking_uri.endswith("s3cret@db:5432/mlflow")        # what the service itself uses
    server = Experiment(id="e2", tracking_uri="http://mlflow:5000", mlflow_experiment="x")
    assert mlflow_link(server, Settings(_env_file=None)).tracking_uri == "http://mlflow:5000"
