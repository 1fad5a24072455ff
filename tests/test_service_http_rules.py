"""HTTP rules the schema promises (issue 20, item 12): `Allow` on a 405 names every method of the path,
empty task / init strings are refused by the published schema itself, a repeated query parameter is a
422 rather than the last value silently winning."""

from __future__ import annotations

import pytest

from service.fakes import FakeCluster
from embinit.spec.full_check import CROSS_NOT_CHECKED
from service.specs import NOT_CHECKED
from service.settings import Settings

from helpers.service import app_clients

SPEC = {"name": "rules", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}


@pytest.fixture
def client(tmp_path):
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        data_roots=[tmp_path], pretrained_roots=[tmp_path], refresh_interval_s=0.0, _env_file=None)
    with app_clients(FakeCluster()) as open_client:
        yield open_client(settings)


@pytest.mark.parametrize("method, path, allow", [
    ("put", "/experiments", "GET, POST"),              # two routes share the path: both methods named
    ("patch", "/experiments/abc123", "DELETE, GET"),
    ("post", "/experiments/abc123/trials", "GET"),
    ("delete", "/health", "GET"),
])
def test_405_names_every_allowed_method(client, method, path, allow):
    r = client.request(method, path)
    assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}
    assert r.headers["allow"] == allow


@pytest.mark.parametrize("query, name, values", [("limit=5&limit=6", "limit", "'5', '6'"),
                                                 ("offset=0&offset=1", "offset", "'0', '1'"),
                                                 ("status=failed&status=running", "status", "'failed', 'running'")])
def test_repeated_query_parameter_is_refused(client, query, name, values):
    r = client.get(f"/experiments?{query}")
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": f"query.{name}",
                                   "msg": f"query parameter {name!r} is given 2 times ({values}); give it once"}]


def test_repeated_query_on_reads_and_submit(client):
    exp_id = client.post("/experiments", json=SPEC).json()["id"]
    for method, url, name, values in [("GET", f"/experiments/{exp_id}/trials?limit=1&limit=2", "limit", "'1', '2'"),
                                      ("GET", f"/experiments/{exp_id}/results?format=csv&format=json", "format",
                                       "'csv', 'json'"),
                                      ("POST", "/experiments?rerun=true&rerun=false", "rerun", "'true', 'false'")]:
        r = client.request(method, url, json=SPEC if method == "POST" else None)
        assert r.status_code == 422
        assert r.json()["detail"] == [{"loc": f"query.{name}",
                                       "msg": f"query parameter {name!r} is given 2 times ({values}); give it once"}]
    assert client.get(f"/experiments/{exp_id}/trials?limit=1&offset=0").status_code == 200


def test_a_query_parameter_the_route_does_not_take_is_refused(client):
    """`?retry=true` for `?rerun=true` submitted without the rerun, `?fromat=csv` answered JSON and
    `?stauts=failed` listed every experiment: unknown names were ignored."""
    exp_id = client.post("/experiments", json=SPEC).json()["id"]
    for method, url, name, takes in [
            ("POST", "/experiments?retry=true", "retry", "this route takes 'rerun'"),
            ("GET", "/experiments?stauts=failed&limit=5", "stauts", "this route takes 'limit', 'offset', 'status'; "
                                                                    "did you mean 'status'?"),
            ("GET", f"/experiments/{exp_id}/results?fromat=csv", "fromat", "this route takes 'baseline', 'format'; "
                                                                           "did you mean 'format'?"),
            ("GET", f"/experiments/{exp_id}?verbose=1", "verbose", "this route takes none")]:
        r = client.request(method, url, json=SPEC if method == "POST" else None)
        assert r.status_code == 422, (url, r.text)
        assert r.json()["detail"] == [{"loc": f"query.{name}", "msg": f"unknown query parameter {name!r}; {takes}"}]
    assert client.get(f"/experiments/{exp_id}/results?format=csv").status_code == 200
    assert client.get("/experiments?status=failed&limit=5").status_code == 200


def test_schema_says_task_and_init_strings_are_not_empty(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["TaskEntry"]["properties"]["task"]["minLength"] == 1
    for side in ("tgt", "src"):
        strings = [s for s in schemas["InitEntry"]["properties"][side]["anyOf"] if s.get("type") == "string"]
        assert strings == [{"type": "string", "minLength": 1}]


@pytest.mark.parametrize("spec, loc", [
    ({**SPEC, "tasks": [{"task": ""}]}, "tasks[0].task"),
    ({**SPEC, "inits": [{"tgt": ""}]}, "inits[0].tgt"),
    ({**SPEC, "inits": [{"tgt": "xavier", "src": ""}]}, "inits[0].src"),
    ({**SPEC, "inits": [""]}, "inits[0]"),
])
def test_empty_task_or_init_is_a_422_naming_it(client, spec, loc):
    r = client.post("/experiments", json=spec)
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": loc, "msg": "String should have at least 1 character, got ''"},
                                  {"loc": "", "msg": CROSS_NOT_CHECKED},   # what waits for it to be fixed
                                  {"loc": "", "msg": NOT_CHECKED}]
    assert client.get("/experiments").json()["total"] == 0


@pytest.mark.parametrize("body, ctype, msg", [
    # the CLI's loader (embinit.spec.loading.SpecLoader) refuses this text; so does the service
    (b"name: rules\ntasks: [synthetic_translation]\nseeds: 1\ninits: [xavier]\nseeds: 3\n", "application/yaml",
     "the body is not valid YAML at line 5, column 1: 'seeds' is given twice (first at line 3) "
     "(while reading a mapping at line 1, column 1)"),
    (b'{"name": "rules", "tasks": ["synthetic_translation"], "seeds": 1, "inits": ["xavier"], "seeds": 3}',
     "application/json", "the body is not valid JSON: 'seeds' is given twice"),
    (b'{"name": "rules", "tasks": [{"task": "synthetic_translation", "epochs": 1, "epochs": 9}], '
     b'"inits": ["xavier"]}', "application/json", "the body is not valid JSON: 'epochs' is given twice"),
])
def test_a_key_given_twice_is_a_422_naming_it(client, body, ctype, msg):
    """Not the last one silently winning (`seeds: 1` ... `seeds: 3` ran 3 seeds)."""
    r = client.post("/experiments", content=body, headers={"content-type": ctype})
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": "", "msg": msg}]
    assert client.get("/experiments").json()["total"] == 0


@pytest.mark.parametrize("spec, problems", [
    ({**SPEC, "defaults": {"tie_embeddings": True}},
     [{"loc": "trials synthetic_translation x Xavier",
       "msg": "tie_embeddings applies to language models only; 'synthetic_translation' is a translation task"}]),
    ({**SPEC, "tasks": ["synthetic_translation", "synthetic_lm"], "inits": ["xavier", "normal"],
      "defaults": {"freeze_non_embeddings": True}, "axes": {"train_embeddings": [True, False]}},
     [{"loc": "trials synthetic_translation x every init (train_embeddings=False), "
              "synthetic_lm x every init (train_embeddings=False)",
       "msg": "train_embeddings=False with freeze_non_embeddings=True leaves nothing to train"}]),
])
def test_settings_no_trial_may_combine_are_a_422(client, spec, problems):
    """What the trainer's check_config refuses in every trial is refused before any trial starts."""
    r = client.post("/experiments", json=spec)
    assert r.status_code == 422
    assert r.json()["detail"] == problems + [{"loc": "", "msg": NOT_CHECKED}]
    assert client.get("/experiments").json()["total"] == 0


def _documented(client, path: str, method: str, status: int, body) -> None:
    """`body` is valid against the schema the OpenAPI document gives for this answer."""
    import jsonschema

    doc = client.app.openapi()
    schema = doc["paths"][path][method]["responses"][str(status)]["content"]["application/json"]["schema"]
    jsonschema.validate(body, {**schema, "components": doc["components"]})


def test_an_unknown_baseline_is_a_422_of_the_documented_shape(client):
    """A client that reads a 422 as the schema says (a list of problems, each with its `loc` and `msg`)
    must not meet a bare string for one query parameter of the route: the unknown baseline is a problem
    of `query.baseline` like an unknown `format`, naming the value and the valid labels."""
    exp_id = client.post("/experiments", json=SPEC).json()["id"]
    client.app.state.runner.advance(f"embinit-exp-{exp_id}", "succeeded", finished=1)
    for params in ({"baseline": "Xavir"}, {"format": "xlsx"}, {"baseline": "Xavier", "format": "xlsx"}):
        r = client.get(f"/experiments/{exp_id}/results", params=params)
        assert r.status_code == 422
        _documented(client, "/experiments/{exp_id}/results", "get", 422, r.json())
    r = client.get(f"/experiments/{exp_id}/results", params={"baseline": "Xavir", "format": "csv"})
    assert r.json()["detail"] == [{"loc": "query.baseline", "msg": "baseline 'Xavir' is not an init of this "
                                                                   "experiment; choose from ['Xavier']"}]
