"""The HTTP API against an in-process fake of Ray and MLflow (`service.fakes`): every endpoint, its
status codes and `detail` for each bad input, idempotent submission, cancel, and an API restart."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml
from fastapi.testclient import TestClient

from service.db import Experiment
from service.fakes import FakeCluster, FakeRunner, FakeStore
from service.main import create_app
from service.settings import Settings
from service.state import DRIVER_LOST

from helpers.service import app_clients

SPEC = {"name": "svc-test", "tasks": ["synthetic_translation"], "inits": ["xavier", "normal"], "seeds": 2}


@pytest.fixture
def roots(tmp_path):
    data, pre = tmp_path / "data", tmp_path / "pretrained"
    data.mkdir()
    pre.mkdir()
    (pre / "vec.txt").write_text("the 0.1 0.2\n")
    return data, pre


@pytest.fixture
def make_settings(tmp_path, roots):
    def make(**overrides):
        values = dict(database_url=f"sqlite:///{tmp_path}/state.db",
                      tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
                      data_roots=[roots[0]], pretrained_roots=[roots[1]], refresh_interval_s=0.0)
        values.update(overrides)
        return Settings(**values)
    return make


@pytest.fixture
def cluster():
    return FakeCluster()


@pytest.fixture
def make_client(make_settings, cluster):
    with app_clients(cluster) as open_client:
        yield lambda **overrides: open_client(make_settings(**overrides))


@pytest.fixture
def client(make_client):
    return make_client()


def submit(client, spec=SPEC, **kwargs):
    return client.post("/experiments", json=spec, **kwargs)


def problems(response) -> dict[str, str]:
    return {p["loc"]: p["msg"] for p in response.json()["detail"]}


# ---- happy paths ---------------------------------------------------------------------------------

def test_health_and_catalog(client):
    assert client.get("/health").json() == {"status": "ok", "version": "0.1.0", "database": "ok",
                                            "ray": "fake (in-process)"}
    tasks = {t["name"]: t for t in client.get("/tasks").json()["tasks"]}
    assert tasks["multi30k"]["defaults"]["batch_size"] == 64 and tasks["multi30k"]["kind"] == "translation"
    assert tasks["sst2"]["metric"] == "acc"
    inits = client.get("/inits").json()
    assert {"xavier", "normal"} <= {i["name"] for i in inits["inits"]}
    assert {"glove", "bert"} <= {s["name"] for s in inits["sources"]}
    assert {"standardize", "shuffle"} <= {t["name"] for t in inits["transforms"]}
    assert all(entry["description"] for group in ("inits", "sources", "transforms", "oov_rules")
               for entry in inits[group])
    assert client.get("/docs").status_code == 200
    schema = client.get("/openapi.json").json()
    assert "ExperimentSpec" in schema["components"]["schemas"]


def test_submit_returns_ids_and_urls(client, cluster):
    r = submit(client)
    assert r.status_code == 202
    body = r.json()
    assert body["n_trials"] == 4 and body["status"] == "queued" and body["created"] is True
    assert body["status_url"] == f"/experiments/{body['id']}"
    assert body["results_url"] == f"/experiments/{body['id']}/results"
    assert cluster.specs[f"embinit-exp-{body['id']}"]["keys"].__len__() == 4
    exp = client.get(body["status_url"]).json()
    assert exp["status"] == "queued" and exp["counts"] == {"pending": 4} and exp["progress"] == 0
    assert exp["spec"]["seeds"] == [0, 1] and exp["mlflow"]["experiment_name"] == "svc-test"


def test_same_spec_is_the_same_experiment_unless_rerun(client, cluster):
    first = submit(client).json()
    again = submit(client)
    assert again.status_code == 200 and again.json()["id"] == first["id"] and again.json()["created"] is False
    as_yaml = client.post("/experiments", content=yaml.safe_dump(SPEC),
                          headers={"content-type": "application/yaml"})
    assert as_yaml.status_code == 200 and as_yaml.json()["id"] == first["id"]
    busy = submit(client, params={"rerun": "true"})  # still queued: a second driver would duplicate work
    assert busy.status_code == 409
    assert busy.json()["detail"] == (f"experiment {first['id']} with this spec is still queued; cancel it or "
                                     "wait before re-running")
    FakeRunner(cluster).advance(f"embinit-exp-{first['id']}", "failed", error="boom", finished=1, failed=3)
    ended = submit(client)
    assert ended.status_code == 200 and ended.json()["id"] == first["id"] and ended.json()["status"] == "failed"
    # it said nothing: a researcher resubmitting after a restart read "already submitted ... failed" alone
    assert ended.json()["notices"] == [
        f"experiment {first['id']} with this spec is failed and was not started again; submit with ?rerun=true "
        "(`embinit experiments submit --rerun`) to run the trials it did not finish (finished ones are reused)"]
    rerun = submit(client, params={"rerun": "true"})
    assert rerun.status_code == 202 and rerun.json()["id"] != first["id"]
    assert rerun.json()["spec_hash"] == first["spec_hash"]


def test_the_same_spec_over_changed_files_is_another_experiment(client, cluster, roots):
    """A researcher replaces the pretrained vectors file (same path, new content) and posts the same spec:
    its trials are other trials (a trial key hashes its files' content), so the answer must not be the old
    experiment, whose results were trained on the old file. The old content again is the old experiment."""
    _, pre = roots
    spec = {**SPEC, "inits": [{"tgt": "glove", "pretrained": "vec.txt"}]}
    first = submit(client, spec).json()
    FakeRunner(cluster).advance(f"embinit-exp-{first['id']}", "succeeded", finished=2)
    (pre / "vec.txt").write_text("the 0.3 0.4\n")
    second = submit(client, spec)
    assert second.status_code == 202 and second.json()["id"] != first["id"]
    assert second.json()["spec_hash"] == first["spec_hash"]
    assert second.json()["notices"] == [f"experiment {first['id']} has this spec, but the content of its files has "
                                        "changed since: this experiment trains on the files as they are now"]
    keys = {e: cluster.specs[f"embinit-exp-{e}"]["keys"] for e in (first["id"], second.json()["id"])}
    assert not set(keys[first["id"]]) & set(keys[second.json()["id"]])
    (pre / "vec.txt").write_text("the 0.1 0.2\n")   # the roots fixture's content
    again = submit(client, spec)
    assert again.status_code == 200 and again.json()["id"] == first["id"] and again.json()["notices"] == []


def test_yaml_submission(client):
    r = client.post("/experiments", content="name: y1\ntasks: [synthetic_lm]\ninits: [xavier]\nseeds: [3]\n",
                    headers={"content-type": "application/x-yaml"})
    assert r.status_code == 202 and r.json()["n_trials"] == 1


def test_progress_eta_and_listing(client, cluster):
    ids = [submit(client, {**SPEC, "name": f"e{i}"}).json()["id"] for i in range(3)]
    FakeRunner(cluster).advance(f"embinit-exp-{ids[0]}", "running", pending=1, running=1, finished=2)
    FakeRunner(cluster).advance(f"embinit-exp-{ids[1]}", "succeeded", finished=4)
    exp = client.get(f"/experiments/{ids[0]}").json()
    assert exp["status"] == "running" and exp["progress"] == 0.5 and exp["eta_s"] > 0
    page = client.get("/experiments", params={"limit": 2}).json()
    assert page["total"] == 3 and [e["id"] for e in page["items"]] == ids[::-1][:2]
    assert [e["id"] for e in client.get("/experiments", params={"offset": 2}).json()["items"]] == [ids[0]]
    running = client.get("/experiments", params={"status": "running"}).json()
    assert [e["id"] for e in running["items"]] == [ids[0]]
    done = client.get("/experiments", params={"status": "succeeded"}).json()["items"]
    assert [e["id"] for e in done] == [ids[1]] and done[0]["progress"] == 1.0 and done[0]["eta_s"] == 0.0


def test_trials_and_results(client, cluster):
    exp_id = submit(client).json()["id"]
    keys = cluster.specs[f"embinit-exp-{exp_id}"]["keys"]
    cluster.mlflow[keys[0]] = "finished"
    trials = client.get(f"/experiments/{exp_id}/trials").json()
    assert trials["total"] == 4 and [t["key"] for t in trials["items"]] == keys
    assert trials["items"][0]["status"] == "finished" and trials["items"][0]["run_id"] == f"run-{keys[0]}"
    assert client.get(f"/experiments/{exp_id}/trials", params={"limit": 1, "offset": 3}).json()["items"][0][
        "key"] == keys[3]
    r = client.get(f"/experiments/{exp_id}/results")
    assert r.headers["content-type"] == "application/json" and r.json()["rows"][0]["init"] == "Xavier"
    md = client.get(f"/experiments/{exp_id}/results", params={"format": "markdown"})
    assert md.headers["content-type"].startswith("text/markdown") and md.text.startswith("| task")
    csv = client.get(f"/experiments/{exp_id}/results", params={"format": "csv"})
    assert csv.headers["content-type"].startswith("text/csv") and csv.text.startswith("task,init")
    tex = client.get(f"/experiments/{exp_id}/results", params={"format": "latex"})
    assert tex.headers["content-type"].startswith("application/x-latex") and "\\begin{tabular}" in tex.text


def test_results_compare_with_the_baseline_query_parameter(make_client, cluster):
    client = make_client()
    exp_id = submit(client).json()["id"]
    FakeRunner(cluster).advance(f"embinit-exp-{exp_id}", "succeeded", finished=4)
    assert client.get(f"/experiments/{exp_id}/results", params={"baseline": "Xavier"}).status_code == 200
    r = client.get(f"/experiments/{exp_id}/results", params={"baseline": "Xavir"})
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": "query.baseline",
                                   "msg": "baseline 'Xavir' is not an init of this experiment; choose from ['Xavier']"}]
    # a report stored by an older layout (no comparisons) is built again, not served; first the finished
    # experiment's background warm-up (service.main._warm) must be done, or it stores a fresh report
    # over the old one after we wrote it (a race CI's load lost once)
    for t in threading.enumerate():
        if t.name.startswith("embinit-warm-"):
            t.join(30)
    with client.app.state.sessions() as session:
        session.get(Experiment, exp_id).report = {"json": "{}", "markdown": "old", "csv": "old"}
        session.commit()
    restarted = make_client()
    assert restarted.get(f"/experiments/{exp_id}/results", params={"format": "markdown"}).text != "old"
    assert restarted.app.state.store.report_builds == 1


def test_finished_report_is_stored_and_not_rebuilt(make_client, cluster):
    client = make_client()
    exp_id = submit(client).json()["id"]
    FakeRunner(cluster).advance(f"embinit-exp-{exp_id}", "succeeded", finished=4)
    store = client.app.state.store
    assert client.get(f"/experiments/{exp_id}").json()["status"] == "succeeded"
    for _ in range(250):  # the transition to `succeeded` renders the report in the background
        with client.app.state.sessions() as session:
            if session.get(Experiment, exp_id).report is not None:
                break
        time.sleep(0.02)
    assert store.report_builds == 1
    for _ in range(3):
        assert client.get(f"/experiments/{exp_id}/results").status_code == 200
    assert store.report_builds == 1
    restarted = make_client()
    assert restarted.get(f"/experiments/{exp_id}/results", params={"format": "csv"}).text.startswith("task,")
    assert restarted.app.state.store.report_builds == 0  # served from the state database


# ---- cancel and restart --------------------------------------------------------------------------

def test_cancel(client, cluster):
    exp_id = submit(client).json()["id"]
    driver = f"embinit-exp-{exp_id}"
    FakeRunner(cluster).advance(driver, "running", pending=2, running=1, finished=1)
    r = client.delete(f"/experiments/{exp_id}")
    assert r.status_code == 202
    body = r.json()
    assert body["status"] == "cancelled" and body["cancel_requested"] is True
    assert body["counts"]["finished"] == 1  # finished results stay
    assert driver in cluster.cancelled and driver in cluster.released
    again = client.delete(f"/experiments/{exp_id}")
    assert again.status_code == 409 and again.json()["detail"] == f"experiment {exp_id} is already cancelled"


class _SlowStart(FakeRunner):
    """A runner whose `start` waits until the test lets it go (a Ray driver being scheduled)."""

    def __init__(self, cluster):
        super().__init__(cluster)
        self.starting, self.go = threading.Event(), threading.Event()

    def start(self, *args, **kwargs):
        self.starting.set()
        assert self.go.wait(10)
        return super().start(*args, **kwargs)


def test_a_cancel_while_the_driver_starts_reaches_the_driver(make_settings, cluster):
    """A script that lists the queued experiments and cancels them can hit one whose driver is still being
    started (no driver name recorded yet): the cancel must reach the driver once it runs, not leave it
    training until the cancel grace period kills it."""
    runner = _SlowStart(cluster)
    with TestClient(create_app(make_settings(), runner=runner, store=FakeStore(cluster))) as client:
        posted = {}
        thread = threading.Thread(target=lambda: posted.update(r=submit(client)))
        thread.start()
        assert runner.starting.wait(10)
        (queued,) = client.get("/experiments", params={"status": "queued"}).json()["items"]
        r = client.delete(f"/experiments/{queued['id']}")
        assert r.status_code == 202 and r.json()["cancel_requested"] is True
        runner.go.set()
        thread.join(10)
        assert posted["r"].status_code == 202
        assert f"embinit-exp-{queued['id']}" in cluster.cancelled
        assert client.get(f"/experiments/{queued['id']}").json()["status"] == "cancelled"


def test_restart_shows_what_happened_meanwhile(make_client, cluster):
    first = make_client()
    # different seeds: trial keys do not depend on the name, and b and c must not share trials
    a, b, c = (submit(first, {**SPEC, "name": n, "seeds": [i, 10 + i]}).json()["id"]
               for i, n in enumerate("abc"))
    runner = FakeRunner(cluster)
    for exp_id in (a, b, c):
        runner.advance(f"embinit-exp-{exp_id}", "running", pending=2, running=2)
    assert first.get(f"/experiments/{a}").json()["status"] == "running"
    first.__exit__(None, None, None)  # the API goes away; the cluster keeps working
    runner.advance(f"embinit-exp-{a}", "succeeded", finished=4)
    runner.lose(f"embinit-exp-{b}")   # b's node died: MLflow shows 1 of 4 done
    keys_b = cluster.specs[f"embinit-exp-{b}"]["keys"]
    cluster.mlflow[keys_b[0]] = "finished"
    runner.lose(f"embinit-exp-{c}")   # c finished and its driver was collected, all in MLflow
    for key in cluster.specs[f"embinit-exp-{c}"]["keys"]:
        cluster.mlflow[key] = "finished"
    second = make_client()            # a new app instance on the same state database
    ea = second.get(f"/experiments/{a}").json()
    assert ea["status"] == "succeeded" and ea["counts"] == {"finished": 4, "running": 0} and ea["finished_at"]
    eb = second.get(f"/experiments/{b}").json()
    assert eb["status"] == "failed" and eb["error"] == DRIVER_LOST and eb["counts"]["finished"] == 1
    assert second.get(f"/experiments/{c}").json()["status"] == "succeeded"
    assert f"embinit-exp-{a}" in cluster.released


def test_a_cancel_after_the_last_trial_cancelled_nothing(client, cluster, monkeypatch):
    """The cancel reached a driver whose trials had all finished (MLflow holds every one), and the driver
    was gone before it reported: the experiment succeeded; it read `cancelled` before. (A driver that
    reports reads the same: `service.driver.final_state`, tests/test_service_driver.py.)"""
    exp_id = submit(client, SPEC).json()["id"]
    runner = FakeRunner(cluster)
    runner.advance(f"embinit-exp-{exp_id}", "running", running=4)
    for key in cluster.specs[f"embinit-exp-{exp_id}"]["keys"]:
        cluster.mlflow[key] = "finished"
    monkeypatch.setattr(FakeRunner, "cancel", lambda self, driver: self.cluster.cancelled.add(driver))
    assert client.delete(f"/experiments/{exp_id}").status_code == 202   # asked; the driver has not answered
    runner.lose(f"embinit-exp-{exp_id}")
    exp = client.get(f"/experiments/{exp_id}").json()
    assert (exp["status"], exp["error"], exp["cancel_requested"]) == ("succeeded", None, True)
    assert exp["counts"]["finished"] == 4


# ---- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, loc, msg", [
    ({**SPEC, "tsks": ["x"]}, "tsks", "unknown field 'tsks'"),
    ({**SPEC, "tasks": ["nope"]}, "tasks[0].task", "'nope' is not a registered task"),
    ({**SPEC, "inits": ["glvoe"]}, "inits[0]", "'glvoe' is not a registered init"),
    ({**SPEC, "seeds": 0}, "seeds", "a seed count must be >= 1"),
    ({k: v for k, v in SPEC.items() if k != "name"}, "name", "Field required"),
])
def test_schema_errors_list_path_and_problem(client, spec, loc, msg):
    r = submit(client, spec)
    assert r.status_code == 422
    # the location is the field's path (the spec layer may name the exact side: inits[0] or inits[0].tgt)
    assert any(where.startswith(loc) and msg in text for where, text in problems(r).items()), r.json()


@pytest.mark.parametrize("ctype, body", [("application/json", json.dumps(SPEC)),
                                         ("application/yaml", yaml.safe_dump(SPEC))])
def test_a_byte_order_mark_is_accepted_in_json_as_in_yaml(client, ctype, body):
    """Windows editors and PowerShell's Out-File start a UTF-8 file with a BOM; the YAML parser skips it, so
    the JSON one must too (RFC 8259 section 8.1 lets a parser ignore it), not answer "decode using utf-8-sig"."""
    r = client.post("/experiments", content=b"\xef\xbb\xbf" + body.encode(), headers={"content-type": ctype})
    assert r.status_code in (200, 202), r.text
    assert r.json()["spec_hash"] == submit(client).json()["spec_hash"]


@pytest.mark.parametrize("body, ctype, msg", [
    (b"{not json", "application/json", "the body is not valid JSON"),
    (b"[1, 2]", "application/json", "a spec must be a mapping at the top level, got list"),
    (b"# nothing yet\n", "application/yaml", "the body is empty: a spec is a mapping with at least name, tasks "
                                             "and inits"),   # was "got NoneType"
    (b"null", "application/json", "the body is empty"),
    (b"a: &x [1]\nb: *x\n", "application/yaml", "YAML aliases (*name) are not accepted"),
    (b"\xff\xfe", "application/json", "the body is not UTF-8 text"),
    (b"[" * 5000 + b"]" * 5000, "application/json", "the body is not valid JSON"),
])
def test_unparsable_bodies(client, body, ctype, msg):
    r = client.post("/experiments", content=body, headers={"content-type": ctype})
    assert r.status_code == 422, r.text
    assert msg in r.json()["detail"][0]["msg"]


def test_unsupported_content_type(client):
    r = client.post("/experiments", content=b"name=x", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert r.json()["detail"] == "unsupported content type 'text/plain'; send application/json or application/yaml"


def test_paths_must_stay_inside_roots(client, roots, tmp_path):
    data, pre = roots
    (pre / "escape").symlink_to(tmp_path)
    glove = {"tgt": "glove"}
    cases = {
        "data_dir": ({**SPEC, "data_dir": "/etc"}, "is outside the allowed data roots"),
        "cache_dir": ({**SPEC, "cache_dir": "../cache"}, "contains '..'"),
        "inits[0].pretrained": ({**SPEC, "inits": [{**glove, "pretrained": "~/.ssh/id_rsa"}]},
                                "is not a plain path"),
        "pretrained.glove": ({**SPEC, "inits": [glove], "pretrained": {"glove": "escape/state.db"}}, "(symlink)"),
        "inits[0].tgt.pretrained": ({**SPEC, "inits": [{"tgt": {"source": "glove", "pretrained": "/etc/passwd"}}]},
                                    "is outside the allowed pretrained roots"),
        "tasks[0].data_dir": ({**SPEC, "tasks": [{"task": "synthetic_lm", "data_dir": "file:///etc"}]},
                              "is not a plain path"),
        "axes.tokenizer[1]": ({**SPEC, "axes": {"tokenizer": ["whitespace", str(tmp_path)]}},
                              "is outside the allowed pretrained roots"),
        "analyses.similarity.snapshot_dir": (
            {**SPEC, "analyses": {"similarity": {"snapshot_dir": "/tmp/elsewhere"}}},
            "is outside the allowed data roots"),
        "analyses.similarity.reference": (
            {**SPEC, "analyses": {"similarity": {"reference": "/etc/passwd"}}},
            "is outside the allowed pretrained roots"),
    }
    for loc, (spec, msg) in cases.items():
        r = submit(client, spec)
        assert r.status_code == 422, (loc, r.text)
        assert msg in problems(r)[loc], (loc, r.json())


def test_environment_references_are_refused(client):
    r = submit(client, {**SPEC, "data_dir": "${HOME}/data"})
    assert r.status_code == 422
    assert "environment variables are not expanded" in problems(r)["data_dir"]


def test_environment_references_do_not_hide_the_specs_other_problems(client):
    r = submit(client, {**SPEC, "data_dir": "${HOME}/data", "seeds": 1.5, "tasks": ["nope"],
                        "inits": [{"tgt": "glove", "pretrained": "${ASSETS}/g.txt"}]})
    assert r.status_code == 422
    found = problems(r)
    assert "environment variables are not expanded" in found["data_dir"]
    assert "environment variables are not expanded" in found["inits[0].pretrained"]
    assert "a seed count >= 1 or a list of distinct seeds" in found["seeds"]
    assert "'nope' is not a registered task" in found["tasks[0].task"]


def test_paths_inside_roots_are_made_absolute(client, roots):
    data, pre = roots
    spec = {**SPEC, "inits": [{"tgt": "glove", "pretrained": "vec.txt"}], "data_dir": "corpora"}
    r = submit(client, spec)
    assert r.status_code == 202, r.text
    stored = client.get(r.json()["status_url"]).json()["spec"]
    assert stored["inits"][0]["pretrained"] == str((pre / "vec.txt").resolve())
    assert stored["data_dir"] == str((data / "corpora").resolve())


def test_a_data_folder_lacking_a_file_is_refused_at_submit(client, roots):
    data, _ = roots
    (data / "sst2").mkdir()
    (data / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\t1\n")   # no dev.tsv
    r = submit(client, {**SPEC, "tasks": ["sst2", {"task": "mnli", "data_dir": "sst2"}], "data_dir": str(data)})
    assert r.status_code == 422, r.text
    found = problems(r)
    assert f"data folder {(data / 'sst2').resolve()} lacks dev.tsv" in found["data_dir"]
    assert "lacks dev_matched.tsv; dev_mismatched.tsv" in found["tasks[1].data_dir"]


def test_a_vector_file_no_trial_can_read_is_refused_at_submit(client, roots):
    _, pre = roots
    (pre / "bad.txt").write_text("the 0.1 0.2\ncat 0.3\n")
    spec = {**SPEC, "inits": ["xavier", {"tgt": "glove", "pretrained": "bad.txt"}], "tasks": [
        {"task": "synthetic_translation", "d_model": 2, "heads": 1}]}
    r = submit(client, spec)
    assert r.status_code == 422, r.text
    assert f"{(pre / 'bad.txt').resolve()}:2: expected a word and 2 values" in problems(r)["inits[1].pretrained"]


def test_tracking_uri_is_the_services(client):
    r = submit(client, {**SPEC, "mlflow": {"tracking_uri": "sqlite:////tmp/elsewhere.db"}})
    assert r.status_code == 422
    assert "this service logs every experiment to its own store" in problems(r)["mlflow.tracking_uri"]


def test_trial_limit(make_client):
    client = make_client(max_trials_per_experiment=3)
    r = submit(client)
    assert r.status_code == 422
    assert problems(r)[""] == "the spec expands into 4 trials; this service accepts at most 3 per experiment"
    r = submit(client, {**SPEC, "seeds": 10 ** 12})
    assert r.status_code == 422 and "expands into 1000000000000 trials" in r.json()["detail"][0]["msg"]


def test_a_seed_count_past_the_limit_is_listed_with_the_specs_other_problems(make_client):
    """`seeds: 10**12` was refused before the rest of the spec was read: its misspelled init and bad epochs
    came one submission later."""
    client = make_client(max_trials_per_experiment=3)
    r = submit(client, {**SPEC, "seeds": 10 ** 12, "inits": ["xaviar"], "tasks": [
        {"task": "synthetic_translation", "epochs": 0}]})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0] == {"loc": "", "msg": "the spec expands into 1000000000000 trials; this service "
                                                       "accepts at most 3 per experiment"}
    found = problems(r)
    assert "'xaviar' is not a registered init" in found["inits[0]"], found
    assert "greater than or equal to 1, got 0" in found["tasks[0].epochs"], found


def test_body_size_limit(make_client):
    client = make_client(max_body_bytes=1000)
    big = {**SPEC, "description": "x" * 2000}
    r = submit(client, big)
    assert r.status_code == 413 and r.json()["detail"] == "request body too large: the limit is 1000 bytes"

    def chunks():  # no content-length: the limit applies to the streamed bytes
        yield json.dumps(big).encode()
    r = client.post("/experiments", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_concurrent_experiment_limit(make_client, cluster):
    client = make_client(max_active_experiments=2)
    first = submit(client, {**SPEC, "name": "one"}).json()["id"]
    assert submit(client, {**SPEC, "name": "two"}).status_code == 202
    r = submit(client, {**SPEC, "name": "three"})
    assert r.status_code == 429 and r.headers["retry-after"] == "60"
    assert r.json()["detail"] == ("2 experiments are queued or running; this service runs at most 2 at once, "
                                  "retry later")
    assert submit(client, {**SPEC, "name": "one"}).status_code == 200  # resubmitting is no new work
    FakeRunner(cluster).advance(f"embinit-exp-{first}", "succeeded", finished=4)
    assert submit(client, {**SPEC, "name": "three"}).status_code == 202


def test_unknown_ids(client):
    for method, path in [("get", "/experiments/nope"), ("get", "/experiments/nope/trials"),
                         ("get", "/experiments/nope/results"), ("delete", "/experiments/nope")]:
        r = client.request(method.upper(), path)
        assert r.status_code == 404 and r.json()["detail"] == "experiment 'nope' not found", path
    assert client.get("/experiments/" + "x" * 500).status_code == 404


def test_bad_query_parameters(client):
    """Each a problem of `query.<name>` (service.problems), naming the value sent."""
    statuses = "'queued', 'running', 'succeeded', 'failed' or 'cancelled'"
    for params, loc, msg in [({"status": "done"}, "query.status", f"Input should be {statuses}, got 'done'"),
                             ({"limit": 0}, "query.limit", "Input should be greater than or equal to 1, got '0'"),
                             ({"offset": 2 ** 63}, "query.offset",   # found by the fuzz test
                              f"Input should be less than or equal to {2 ** 31 - 1}, got '{2 ** 63}'")]:
        r = client.get("/experiments", params=params)
        assert r.status_code == 422 and r.json()["detail"] == [{"loc": loc, "msg": msg}], r.json()
    exp_id = submit(client).json()["id"]
    r = client.get(f"/experiments/{exp_id}/results", params={"format": "xlsx"})
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": "query.format",
                                   "msg": "Input should be 'json', 'markdown', 'csv' or 'latex', got 'xlsx'"}]


def test_driver_start_failure_is_recorded(make_settings, cluster):
    app = create_app(make_settings(), runner=FakeRunner(cluster, fail_start=True), store=FakeStore(cluster))
    with TestClient(app) as client:
        r = submit(client)
        assert r.status_code == 503 and "could not be started: no Ray cluster" in r.json()["detail"]
        exp = client.get("/experiments").json()["items"][0]
        assert exp["status"] == "failed" and exp["error"].startswith("could not start the Ray driver")


def test_a_submission_whose_driver_did_not_start_is_retried_by_the_same_request(make_settings, cluster):
    # The 503's experiment ran nothing, yet the same POST again was answered with it (200, "created":
    # false, failed): a client retrying the 503 got a dead experiment, and only ?rerun=true started it.
    runner = FakeRunner(cluster, fail_start=True)
    app = create_app(make_settings(), runner=runner, store=FakeStore(cluster))
    with TestClient(app) as client:
        r = submit(client)
        assert r.status_code == 503 and r.headers["retry-after"] == "10"
        assert r.json()["detail"].endswith("nothing ran: send the same request again to retry")
        failed = client.get("/experiments").json()["items"][0]
        runner.fail_start = False   # Ray is back
        again = submit(client)
        assert again.status_code == 202 and again.json()["created"] is True, again.json()
        assert again.json()["id"] != failed["id"]
        assert client.get(f"/experiments/{failed['id']}").json()["status"] == "failed"   # kept, as it was
        assert submit(client).json() == {**again.json(), "created": False}   # and then deduplicated as ever


# ---- auth ----------------------------------------------------------------------------------------

def test_token_guards_writes(make_client):
    client = make_client(api_token="s3cret")
    r = submit(client)
    assert r.status_code == 401 and r.json()["detail"].startswith("missing bearer token")
    assert r.headers["www-authenticate"] == "Bearer"
    r = submit(client, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["detail"] == "invalid bearer token"
    assert submit(client, headers={"Authorization": "Basic czNjcmV0"}).status_code == 401
    ok = submit(client, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 202
    assert client.delete(f"/experiments/{ok.json()['id']}").status_code == 401
    assert client.get(f"/experiments/{ok.json()['id']}").status_code == 200  # reads open by default


def test_token_can_guard_reads(make_client):
    client = make_client(api_token="s3cret", reads_require_token=True)
    for path in ("/experiments", "/inits", "/tasks"):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/health").status_code == 200  # liveness stays open


def test_oversized_unauthenticated_body_is_refused_before_reading(make_client):
    client = make_client(api_token="s3cret", max_body_bytes=100)
    r = client.post("/experiments", content=b"x" * 1000, headers={"content-type": "application/json"})
    assert r.status_code == 401


class _StubbornRunner(FakeRunner):
    """A driver that ignores cancel requests, or does not answer polls."""

    busy = False

    def cancel(self, driver) -> None:
        self.cluster.cancelled.add(driver)

    def poll(self, driver):
        if self.busy:
            raise TimeoutError(f"driver {driver} did not answer")
        return super().poll(driver)


def test_a_driver_that_ignores_cancel_is_stopped_after_the_grace_period(make_settings, cluster):
    runner = _StubbornRunner(cluster)
    app = create_app(make_settings(cancel_grace_s=0.0), runner=runner, store=FakeStore(cluster))
    with TestClient(app) as client:
        exp_id = submit(client).json()["id"]
        runner.advance(f"embinit-exp-{exp_id}", "running", pending=3, running=1)
        body = client.delete(f"/experiments/{exp_id}").json()
        assert body["status"] == "cancelled" and body["error"] == "stopped after the cancel grace period"
        assert f"embinit-exp-{exp_id}" in cluster.released  # killed


def test_a_driver_that_does_not_answer_keeps_the_known_state(make_settings, cluster):
    runner = _StubbornRunner(cluster)
    app = create_app(make_settings(), runner=runner, store=FakeStore(cluster))
    with TestClient(app) as client:
        exp_id = submit(client).json()["id"]
        runner.advance(f"embinit-exp-{exp_id}", "running", pending=3, running=1)
        assert client.get(f"/experiments/{exp_id}").json()["counts"] == {"pending": 3, "running": 1}
        runner.busy = True
        exp = client.get(f"/experiments/{exp_id}").json()
        assert exp["status"] == "running" and exp["counts"] == {"pending": 3, "running": 1} and exp["error"] is None


def test_field_problems_come_with_the_path_problems(client, roots):
    """A spec with a field problem also hears of its paths (a file missing under the roots, one outside
    them), and that the later checks were not run; they used to come one round later."""
    spec = {**SPEC, "seeds": 0, "inits": [{"tgt": "glove", "pretrained": str(roots[1] / "nope.txt")}],
            "tasks": [{"task": "synthetic_translation", "data_dir": "/etc"}]}
    r = submit(client, spec)
    found = problems(r)
    assert r.status_code == 422 and "a seed count must be >= 1" in found["seeds"]
    assert found["inits[0].pretrained"].endswith("nope.txt' does not exist")
    assert "outside the allowed data roots" in found["tasks[0].data_dir"]
    assert found[""].endswith("not checked until the problems above are fixed")


def test_model_sizes_and_data_folders_in_one_answer(client, roots):
    """A d_model the pretrained file does not have and a data folder lacking a file: one 422 names both
    (the data folder's problem used to wait until the model size was fixed)."""
    data, _ = roots
    (data / "sst2").mkdir()
    (data / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\t1\n")   # no dev.tsv
    spec = {**SPEC, "tasks": [{"task": "sst2", "d_model": 4}], "data_dir": str(data),
            "inits": [{"tgt": "glove", "pretrained": "vec.txt"}]}
    r = submit(client, spec)
    assert r.status_code == 422, r.text
    msgs = [p["msg"] for p in r.json()["detail"]]
    assert any("lacks dev.tsv" in m for m in msgs)
    assert any("dimension 2 but the model's d_model is 4" in m for m in msgs)


def test_a_field_problem_comes_with_the_data_folders_problems(client, roots, tmp_path):
    """A spec refused for a field also hears of its data folder inside the roots lacking a file (it used to
    come one round later), with the service's advice; a folder outside the roots is not read."""
    data, _ = roots
    (data / "sst2").mkdir()
    (data / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\t1\n")   # no dev.tsv
    (tmp_path / "outside" / "sst2").mkdir(parents=True)
    spec = {**SPEC, "tasks": [{"task": "sst2", "dropout": 1.5, "data_dir": str(data / "sst2")},
                              {"task": "multi30k", "data_dir": str(tmp_path / "outside")}]}
    found = problems(submit(client, spec))
    assert "less than 1" in found["tasks[0].dropout"]
    assert "lacks dev.tsv" in found["tasks[0].data_dir"]
    assert "outside the allowed data roots" in found["tasks[1].data_dir"]   # said, not read
    assert "data folders" not in found[""]


def test_a_field_problem_comes_with_heads_vs_d_and_the_bounds_in_one_answer(client):
    """One task with a bad dropout, heads that do not divide d_model and an lr and a batch size beyond the
    service's bounds: one 422 lists all four, and says the bounds were checked only on written values
    (they used to come in three rounds: the dropout, then the heads, then the bounds)."""
    spec = {**SPEC, "tasks": [{"task": "synthetic_translation", "dropout": 1.5, "heads": 7, "d_model": 64,
                               "lr": 5, "batch_size": 100000}]}
    found = problems(submit(client, spec))
    assert "less than 1" in found["tasks[0].dropout"] and "heads=7 does not divide" in found["tasks[0].heads"]
    assert found["tasks[0].lr"] == "5 exceeds this service's limit of 1 (setting max_lr)"
    assert found["tasks[0].batch_size"].startswith("100000 exceeds this service's limit")
    assert "bounds on the values the spec leaves to defaults not checked" in found[""]


def test_a_task_without_data_hears_the_services_advice_not_the_command_lines(client, monkeypatch, tmp_path):
    """Offline, a hub task with no data folder: the 422 says how a spec sent here gives it one (a data_dir
    inside the data roots), not `--data-dir` (it used to give the command line's advice)."""
    import huggingface_hub.constants
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("EMBINIT_DATA_DIR", raising=False)
    found = problems(submit(client, {**SPEC, "tasks": ["sst2"]}))["tasks[0]"]
    assert found.startswith("sst2: no local data (no data_dir in the spec and this service's $EMBINIT_DATA_DIR "
                            "not set)")
    assert "inside this service's data roots (setting EMBINIT_DATA_ROOTS)" in found and "--data-dir" not in found


def test_a_rerun_while_the_cancel_is_under_way_says_so(make_settings, cluster):
    """`DELETE` then `POST ?rerun=true`, the way a script restarts an experiment: while the driver stops
    its trials the 409 says the cancel is under way and when to try again, not "cancel it"."""
    runner = _StubbornRunner(cluster)
    with TestClient(create_app(make_settings(), runner=runner, store=FakeStore(cluster))) as client:
        exp_id = submit(client).json()["id"]
        runner.advance(f"embinit-exp-{exp_id}", "running", pending=3, running=1)
        assert client.delete(f"/experiments/{exp_id}").json()["status"] == "running"
        busy = submit(client, params={"rerun": "true"})
        assert busy.status_code == 409 and busy.headers["retry-after"] == "5"
        assert busy.json()["detail"] == (f"experiment {exp_id} with this spec is being cancelled (its running "
                                         "trials are stopping); re-run it once its status is cancelled")


class _Unreachable(FakeRunner):
    """A Ray cluster the API cannot reach for the moment (a Ray Client connection that dropped)."""

    down = False

    def cancel(self, driver) -> None:
        if self.down:
            raise ConnectionError("Ray Client connection to ray://head:10001 lost")
        super().cancel(driver)


def test_a_cancel_ray_cannot_take_now_is_a_503_that_says_it_is_recorded(make_settings, cluster):
    """Not a 500 "internal error" that leaves the researcher guessing: the cancel is kept (the driver is
    stopped once Ray answers again), and the answer says so, with Retry-After."""
    runner = _Unreachable(cluster)
    with TestClient(create_app(make_settings(), runner=runner, store=FakeStore(cluster))) as client:
        exp_id = submit(client).json()["id"]
        runner.advance(f"embinit-exp-{exp_id}", "running", pending=3, running=1)
        runner.down = True
        r = client.delete(f"/experiments/{exp_id}")
        assert r.status_code == 503 and r.headers["retry-after"] == "10"
        assert r.json()["detail"] == (f"the cancel of experiment {exp_id} is recorded, but its Ray driver could "
                                      "not be told now (ConnectionError: Ray Client connection to "
                                      "ray://head:10001 lost); send the DELETE again to retry")
        assert client.get(f"/experiments/{exp_id}").json()["cancel_requested"] is True
        assert "503" in client.app.openapi()["paths"]["/experiments/{exp_id}"]["delete"]["responses"]
        runner.down = False
        assert client.delete(f"/experiments/{exp_id}").json()["status"] == "cancelled"


def test_a_cancel_of_an_experiment_that_just_finished_is_a_409(client, cluster):
    """The driver finished after the last read: the DELETE must say the experiment already succeeded
    (409), not answer 202 and leave a succeeded experiment marked `cancel_requested`."""
    exp_id = submit(client).json()["id"]
    FakeRunner(cluster).advance(f"embinit-exp-{exp_id}", "succeeded", finished=4)
    r = client.delete(f"/experiments/{exp_id}")
    assert r.status_code == 409 and r.json()["detail"] == f"experiment {exp_id} has already succeeded"
    exp = client.get(f"/experiments/{exp_id}").json()
    assert (exp["status"], exp["cancel_requested"]) == ("succeeded", False)
    assert f"embinit-exp-{exp_id}" not in cluster.cancelled


def test_a_cancel_of_a_failed_experiment_says_it_has_failed(client, cluster):
    """Review C4: the 409 read "is already succeeded" / "is already failed"."""
    exp_id = submit(client).json()["id"]
    FakeRunner(cluster).advance(f"embinit-exp-{exp_id}", "failed", error="boom", finished=1, failed=3)
    r = client.delete(f"/experiments/{exp_id}")
    assert r.status_code == 409 and r.json()["detail"] == f"experiment {exp_id} has already failed"


def test_a_spec_that_defines_its_own_task(client, cluster, roots, tmp_path):
    """`define_tasks` through the API: its data folder obeys the data roots, its files are checked at
    submit (a bad row named by file and line), the catalog lists built-in tasks only, and the driver is
    sent the definition with the spec."""
    data, _ = roots
    (data / "reviews").mkdir()
    (data / "reviews" / "train.csv").write_text('text,label\n"good, very good",pos\nbad,neg\n')
    (data / "reviews" / "dev.csv").write_text("text,label\nfine,pos\n")
    defined = {"reviews": {"like": "sst2", "files": {"train": "train.csv", "dev": "dev.csv"},
                           "columns": ["text", "label"], "labels": ["neg", "pos"], "epochs": 1}}
    spec = {**SPEC, "name": "own-task", "define_tasks": defined, "tasks": [{"task": "reviews", "data_dir": "reviews"}],
            "data_dir": str(data)}
    outside = submit(client, {**spec, "tasks": [{"task": "reviews", "data_dir": str(tmp_path)}]})
    assert outside.status_code == 422 and "outside the allowed data roots" in problems(outside)["tasks[0].data_dir"]
    r = submit(client, spec)
    assert r.status_code == 202, r.text
    sent = cluster.specs[f"embinit-exp-{r.json()['id']}"]["spec"]
    assert sent["define_tasks"]["reviews"]["columns"] == ["text", "label"]
    assert "reviews" not in {t["name"] for t in client.get("/tasks").json()["tasks"]}
    (data / "reviews" / "dev.csv").write_text("text,label\nfine,great\n")
    bad = submit(client, {**spec, "name": "own-task-2"})
    assert bad.status_code == 422 and "dev.csv:2: unknown label 'great'" in bad.text, bad.text
