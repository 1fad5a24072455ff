"""Every 422 the API answers has one shape (service.problems): `{"detail": [{"loc": str, "msg": str}, ...]}`,
whatever raised it: a spec's problems, a query parameter FastAPI refused, a repeated query parameter, an
unknown baseline, an `EmbinitError`, a `RecursionError`, or an `HTTPException(422)` with a string."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from embinit.errors import EmbinitError
from embinit.spec import SpecError
from service.fakes import FakeCluster
from service.problems import parameter_loc
from service.settings import Settings

from helpers.service import app_clients

SPEC = {"name": "problems", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}


@pytest.fixture
def open_client(tmp_path):
    def make(**overrides):
        return opener(Settings(**{**dict(database_url=f"sqlite:///{tmp_path}/state.db",
                                         tracking_uri=f"sqlite:///{tmp_path}/m.db", data_roots=[tmp_path],
                                         pretrained_roots=[tmp_path], refresh_interval_s=0.0, _env_file=None),
                                  **overrides}))
    with app_clients(FakeCluster()) as opener:
        yield make


@pytest.fixture
def client(open_client):
    return open_client()


def _bad_values(schema: dict) -> list[str]:
    """Query values the parameter's schema refuses."""
    schema = next((s for s in schema.get("anyOf", []) if s.get("type") != "null"), schema)
    if "enum" in schema:
        return ["not-one-of-them"]
    if schema.get("type") == "integer":
        return ["abc", *(str(schema[k] + d) for k, d in (("minimum", -1), ("maximum", 1)) if k in schema)]
    if schema.get("type") == "boolean":
        return ["maybe"]
    return [v for k, v in (("minLength", ""), ("maxLength", "x" * (schema.get("maxLength", 0) + 1)))
            if k in schema]


def _bad_requests(path: str, op: dict) -> list[dict]:
    """Requests to one operation that are each wrong in one way: a query parameter given twice, each
    query parameter with each value its schema refuses, a body that is no spec."""
    url = path.replace("{exp_id}", "nope")
    out = [{"url": f"{url}?x=1&x=2"}]
    for p in op.get("parameters", []):
        if p["in"] == "query":
            out += [{"url": url, "params": {p["name"]: v}, "loc": f"query.{p['name']}"}
                    for v in _bad_values(p["schema"])]
    if "requestBody" in op:
        out += [{"url": url, "content": body, "headers": {"content-type": ctype}}
                for body, ctype in ((b"[1]", "application/json"), (b"{", "application/json"),
                                    (b"a: [", "application/yaml"), (b"{}", "application/json"))]
    return out


def _one_shape(body) -> None:
    assert isinstance(body, dict) and set(body) == {"detail"}, body
    assert isinstance(body["detail"], list) and body["detail"], body
    for problem in body["detail"]:
        assert isinstance(problem, dict) and set(problem) == {"loc", "msg"}, problem
        assert isinstance(problem["loc"], str) and isinstance(problem["msg"], str) and problem["msg"], problem


def test_every_route_answers_a_422_in_the_one_shape(client):
    """Walks every operation of the schema: each one that documents a 422 answers one for each bad
    request, in the one shape, valid against what the schema documents; the others never answer one.
    A new route or parameter is walked too, so it cannot bring back another shape."""
    import jsonschema

    doc = client.app.openapi()
    documented, answered = set(), set()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if "422" in op["responses"]:
                documented.add((method, path))
            for req in _bad_requests(path, op):
                r = client.request(method.upper(), req["url"], params=req.get("params"),
                                   content=req.get("content"), headers=req.get("headers"))
                if r.status_code != 422:
                    assert r.status_code < 500, (method, req, r.text)
                    continue
                answered.add((method, path))
                _one_shape(r.json())
                schema = op["responses"]["422"]["content"]["application/json"]["schema"]
                jsonschema.validate(r.json(), {**schema, "components": doc["components"]})
                if "loc" in req:
                    assert [p["loc"] for p in r.json()["detail"]] == [req["loc"]], (method, req, r.json())
    assert answered == documented and len(documented) == 6, (answered, documented)
    assert "HTTPValidationError" not in doc["components"]["schemas"]   # FastAPI's own 422 is never answered


def test_query_parameter_problems_name_the_parameter_and_value(client):
    r = client.get("/experiments", params={"limit": "abc", "offset": -1, "status": "done"})
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {"loc": "query.status", "msg": "Input should be 'queued', 'running', 'succeeded', 'failed' or "
                                       "'cancelled', got 'done'"},
        {"loc": "query.limit", "msg": "Input should be a valid integer, unable to parse string as an integer, "
                                      "got 'abc'"},
        {"loc": "query.offset", "msg": "Input should be greater than or equal to 0, got '-1'"}]
    r = client.post("/experiments", params={"rerun": "maybe"}, json=SPEC)
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": "query.rerun", "msg": "Input should be a valid boolean, unable to "
                                                                "interpret input, got 'maybe'"}]


def test_query_parameter_problems_keep_to_max_problems(open_client):
    client = open_client(max_problems=2)
    r = client.get("/experiments", params={"limit": "abc", "offset": "abc", "status": "done"})
    assert r.status_code == 422
    assert [p["loc"] for p in r.json()["detail"]] == ["query.status", "query.limit", ""]
    assert r.json()["detail"][-1] == {"loc": "", "msg": "... and 1 more problems (only the first 2 are listed)"}


@pytest.mark.parametrize("loc, written", [(("query", "limit"), "query.limit"), (["path", "exp_id"], "path.exp_id"),
                                          (("body", "tasks", 0, "task"), "tasks[0].task"), (("body",), "")])
def test_a_location_is_written_as_the_spec_writes_it(loc, written):
    """Parameters by where they were sent; a body field (no route takes a parsed body today) as the
    spec's problems name it, so a future body route answers the same paths as the submit."""
    assert parameter_loc(loc) == written


def _raising(client, exc: Exception) -> None:
    """A route that raises `exc`, as a route's code deep down might."""
    def boom():
        raise exc
    client.app.add_api_route("/boom", boom)
    client.app.openapi_schema = None


@pytest.mark.parametrize("exc, detail", [
    (EmbinitError("'glvoe' is not a registered init"), [{"loc": "", "msg": "'glvoe' is not a registered init"}]),
    (RecursionError("maximum recursion depth exceeded"), [{"loc": "", "msg": "the request is nested too deeply"}]),
    (HTTPException(422, detail="a string some new route raised"),
     [{"loc": "", "msg": "a string some new route raised"}]),
    (HTTPException(422, detail=[{"loc": "seeds", "msg": "a seed count must be >= 1"}]),
     [{"loc": "seeds", "msg": "a seed count must be >= 1"}]),
    (SpecError([("seeds", "a seed count must be >= 1"), ("tasks[0].task", "'nope' is not a registered task")],
               notes=["model sizes not checked until the problems above are fixed"]),
     [{"loc": "seeds", "msg": "a seed count must be >= 1"},
      {"loc": "tasks[0].task", "msg": "'nope' is not a registered task"},
      {"loc": "", "msg": "model sizes not checked until the problems above are fixed"}]),
])
def test_every_exception_that_is_a_422_has_the_one_shape(client, exc, detail):
    _raising(client, exc)
    r = client.get("/boom")
    assert r.status_code == 422
    assert r.json() == {"detail": detail}


def test_a_spec_error_keeps_to_max_problems(open_client):
    client = open_client(max_problems=1)
    _raising(client, SpecError([("seeds", "a seed count must be >= 1"), ("name", "Field required")]))
    r = client.get("/boom")
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": "seeds", "msg": "a seed count must be >= 1"},
                                  {"loc": "", "msg": "... and 1 more problems (only the first 1 are listed)"}]


def test_other_client_errors_keep_one_message(client):
    """Not a list of fields: one thing about the whole request (404, 405, 415)."""
    r = client.get("/experiments/nope")
    assert r.status_code == 404 and r.json() == {"detail": "experiment 'nope' not found"}
    r = client.put("/experiments")
    assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}
    r = client.post("/experiments", content=b"name=x", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert r.json() == {"detail": "unsupported content type 'text/plain'; send application/json or application/yaml"}
