"""Schema-driven fuzzing (schemathesis on the app's OpenAPI schema): no generated request, valid or
not, gets a 5xx. Runs against the ASGI app with the in-process fake runner; bounded examples."""

from __future__ import annotations

import tempfile

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.main import create_app
from service.settings import Settings

pytestmark = pytest.mark.slow


def _app(tmp_dir: str):
    cluster = FakeCluster()
    return create_app(Settings(database_url=f"sqlite:///{tmp_dir}/fuzz-state.db",
                               tracking_uri=f"sqlite:///{tmp_dir}/fuzz-mlflow.db", data_roots=[tmp_dir],
                               pretrained_roots=[tmp_dir], max_active_experiments=1000,
                               refresh_interval_s=0.0, api_token="fuzz-token"),
                      runner=FakeRunner(cluster), store=FakeStore(cluster))


# Built at import (schemathesis needs the schema to generate the tests); the app is cheap and offline.
schema = schemathesis.openapi.from_asgi("/openapi.json", _app(tempfile.mkdtemp(prefix="embinit-fuzz-")))


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):
    for headers in ({}, {"Authorization": "Bearer fuzz-token"}):
        response = case.call(headers=headers)
        assert response.status_code < 500, (case.method, case.path, case.body, response.text)
