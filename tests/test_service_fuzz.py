"""Schema-driven fuzzing (schemathesis on the app's OpenAPI schema) with every check schemathesis has
(`--checks all`: no 5xx, status codes, content types, headers and bodies as documented, valid data
accepted, invalid data rejected, auth not ignored, ...), against the state database on SQLite and on a
real PostgreSQL (Debian's server, started by the test as an unprivileged user). In-process fake runner;
bounded examples so CI stays lean."""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config import SchemathesisConfig

from helpers.postgres import local_server_or_skip
from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.main import create_app
from service.settings import Settings

pytestmark = pytest.mark.slow
TOKEN = "fuzz-token"


@pytest.fixture(scope="module")
def postgres_url():
    """A throwaway PostgreSQL server; skips without a server binary (`.ci/run` installs Debian's)."""
    with local_server_or_skip() as url:
        yield url


def _app(database_url: str, tmp_dir: str):
    cluster = FakeCluster()
    return create_app(Settings(database_url=database_url, tracking_uri=f"sqlite:///{tmp_dir}/fuzz-mlflow.db",
                               data_roots=[tmp_dir], pretrained_roots=[tmp_dir], max_active_experiments=1000,
                               refresh_interval_s=0.0, api_token=TOKEN, _env_file=None),
                      runner=FakeRunner(cluster), store=FakeStore(cluster))


# A spec can be well formed by its JSON schema and still not run: rules across fields (init names, heads
# that divide d_model), paths inside the roots, the service's bounds. The submit answers those with a
# documented 422 listing each problem, so for it a 422 is an accepted answer to schema-valid data.
CONFIG = SchemathesisConfig.from_dict({"operations": [
    {"include-path": "/experiments", "include-method": "POST",
     "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "401", "404", "409", "422", "429"]}}}]})
load_all_checks()
ALL_CHECKS = list(CHECKS.get_all())


def test_every_check_is_run():
    names = {c.__name__ for c in ALL_CHECKS}
    assert {"not_a_server_error", "status_code_conformance", "response_schema_conformance",
            "positive_data_acceptance", "negative_data_rejection", "ignored_auth"} <= names


def _fuzz(app, max_examples: int = 15) -> None:
    """Every operation, `max_examples` generated cases each (valid and invalid), every check."""
    api = schemathesis.openapi.from_asgi("/openapi.json", app, config=CONFIG)
    for operation in api.get_all_operations():
        op = operation.ok()

        @given(case=op.as_strategy())
        @settings(max_examples=max_examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=ALL_CHECKS)
        run()


def test_every_check_passes_on_sqlite(tmp_path):
    _fuzz(_app(f"sqlite:///{tmp_path}/fuzz-state.db", str(tmp_path)))


def test_every_check_passes_on_postgres(postgres_url, tmp_path):
    _fuzz(_app(postgres_url, str(tmp_path)))


def test_postgres_stores_and_lists(postgres_url, tmp_path):
    """The same app on PostgreSQL: a spec that would hold a non-finite number or a NUL is refused before
    the JSON column sees it (a 422, not a 500), and a valid one round-trips."""
    from fastapi.testclient import TestClient
    spec = {"name": "pg", "tasks": ["synthetic_lm"], "inits": ["xavier"], "seeds": 1}
    with TestClient(_app(postgres_url, str(tmp_path))) as client:
        auth = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
        bad = client.post("/experiments", headers=auth,
                          content='{"name": "pg", "tasks": ["synthetic_lm"], "inits": ["xavier"], '
                                  '"defaults": {"lr": Infinity}}')
        assert bad.status_code == 422, bad.text
        nul = client.post("/experiments", headers=auth, json={**spec, "description": "a\x00b"})
        assert nul.status_code == 422, nul.text
        ok = client.post("/experiments", headers=auth, json={**spec, "seeds": [int(time.time()) % 1000]})
        assert ok.status_code == 202, ok.text
        assert client.get(ok.json()["status_url"]).json()["spec"]["name"] == "pg"
