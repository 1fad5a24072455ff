"""Hostile and unrunnable specs against the API (in-process fake of Ray and MLflow): symlinks that lead a
not-yet-existing path out of a root, non-finite numbers, NUL characters, another team's MLflow
experiment, resources no node has, values beyond the service's bounds, and specs whose validation
would cost far more than the request. Each is a clear 422 that names the field, and stores nothing."""

from __future__ import annotations

import json
import os
import pickle
import time

import pytest

from embinit.tasks import cache
from embinit.trusted import TRUSTED_ROOTS_ENV, is_trusted
from service.fakes import FakeCluster, FakeRunner

from helpers.service import nothing_stored, problems, rooted_clients

SPEC = {"name": "hostile", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 1}


@pytest.fixture
def cluster():
    return FakeCluster()


@pytest.fixture
def make_client(tmp_path, cluster):
    with rooted_clients(tmp_path, cluster) as open_client:
        yield open_client


@pytest.fixture
def client(make_client):
    return make_client()


def test_a_missing_pretrained_file_inside_the_root_is_refused_at_submit(client, tmp_path):
    """Not a 202 that fails at its first trial: the file a pretrained path names is read, never made."""
    (tmp_path / "pretrained" / "glove.50d.txt").write_text("the 0.1 0.2\n")
    missing = str(tmp_path / "pretrained" / "glove.100d.txt")
    spec = {**SPEC, "inits": ["xavier", "glove"], "pretrained": {"glove": missing}}
    assert problems(client.post("/experiments", json=spec))["pretrained.glove"] == f"{missing!r} does not exist"
    assert nothing_stored(client)
    spec["pretrained"] = {"glove": str(tmp_path / "pretrained" / "glove.50d.txt")}
    assert client.post("/experiments", json=spec).status_code == 202


# ---- 3: symlinks out of a root -----------------------------------------------------------------------

@pytest.mark.parametrize("field", ["cache_dir", "data_dir", "analyses.similarity.snapshot_dir"])
def test_a_new_path_under_a_symlink_out_of_the_root_is_refused(client, tmp_path, field):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "data" / "escape").symlink_to(elsewhere)
    spec = dict(SPEC)
    if field.startswith("analyses"):
        spec["analyses"] = {"similarity": {"snapshot_dir": "escape/newdir"}}
    else:
        spec[field] = "escape/newdir"
    assert "leads outside the allowed data roots" in problems(client.post("/experiments", json=spec))[field]
    assert nothing_stored(client)


def test_a_new_path_under_a_symlink_inside_the_root_is_accepted(client, tmp_path):
    (tmp_path / "data" / "real").mkdir()
    (tmp_path / "data" / "link").symlink_to(tmp_path / "data" / "real")
    r = client.post("/experiments", json={**SPEC, "cache_dir": "link/newdir"})
    assert r.status_code == 202, r.text
    stored = client.get(r.json()["status_url"]).json()["spec"]["cache_dir"]
    assert stored == str((tmp_path / "data" / "real" / "newdir").resolve())


def test_pickles_are_loaded_and_written_only_inside_the_trusted_roots(tmp_path, monkeypatch):
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "escape").symlink_to(elsewhere)
    entry = {"format": cache.FORMAT, "value": 1}
    for folder in (root, elsewhere):
        (folder / "e.pkl").write_bytes(pickle.dumps(entry))
    monkeypatch.setenv(TRUSTED_ROOTS_ENV, str(root))
    assert cache.load(root / "e.pkl") == {"format": cache.FORMAT, "value": 1}
    assert cache.load(root / "escape" / "e.pkl") is None   # the same file name, really outside the root
    assert not is_trusted(root / "escape" / "new" / "x.pkl")
    cache.save(root / "escape" / "new.pkl", {"value": 2})
    assert not (elsewhere / "new.pkl").exists()
    cache.save(root / "new.pkl", {"value": 2})
    assert cache.load(root / "new.pkl")["value"] == 2
    monkeypatch.delenv(TRUSTED_ROOTS_ENV)                  # the CLI: everything is the user's own
    assert cache.load(root / "escape" / "e.pkl") is not None


# ---- 4: non-finite numbers -----------------------------------------------------------------------------

@pytest.mark.parametrize("body, loc", [
    ('{"name": "h", "tasks": ["synthetic_lm"], "inits": ["xavier"], "defaults": {"lr": Infinity}}',
     "defaults.lr"),
    ('{"name": "h", "tasks": ["synthetic_lm"], "inits": ["xavier"], "defaults": {"lr": 1e999}}', "defaults.lr"),
    ('{"name": "h", "tasks": [{"task": "synthetic_lm", "dropout": NaN}], "inits": ["xavier"]}',
     "tasks[0].dropout"),
    ('{"name": "h", "tasks": ["synthetic_lm"], "inits": ["xavier"], "axes": {"lr": [0.1, -Infinity]}}',
     "axes.lr[1]"),
    ('{"name": "h", "tasks": ["synthetic_lm"], "inits": ["xavier"], "resources": {"cpus": Infinity}}',
     "resources.cpus"),
])
def test_non_finite_numbers_are_refused_at_parse_time(client, body, loc):
    r = client.post("/experiments", content=body, headers={"content-type": "application/json"})
    assert "is not a finite number" in problems(r)[loc]
    assert nothing_stored(client)


def test_non_finite_yaml_numbers_are_refused(client):
    r = client.post("/experiments", content="name: h\ntasks: [synthetic_lm]\ninits: [xavier]\n"
                                            "search: {method: optuna, space: {lr: {low: 0.1, high: .inf}}}\n",
                    headers={"content-type": "application/yaml"})
    assert "is not a finite number" in problems(r)["search.space.lr.high"]


def test_the_library_refuses_non_finite_floats_too():
    from embinit.spec import SpecError, load_spec
    with pytest.raises(SpecError) as e:
        load_spec({**SPEC, "defaults": {"lr": float("inf")}})
    assert "defaults.lr" in dict(e.value.problems)


# ---- 5: unrunnable or unbounded ------------------------------------------------------------------------

@pytest.mark.parametrize("spec, loc", [
    ({**SPEC, "description": "a\x00b"}, "description"),
    ({**SPEC, "mlflow": {"experiment": "team\x00x"}}, "mlflow.experiment"),
    ({**SPEC, "inits": [{"tgt": "xavier", "name": "x\x00"}]}, "inits[0].name"),
])
def test_nul_characters_are_refused(client, spec, loc):
    assert "NUL character" in problems(client.post("/experiments", json=spec))[loc]
    assert nothing_stored(client)


@pytest.mark.parametrize("spec, loc", [
    ({**SPEC, "inits": [{"tgt": "glove", "pretrained": "a" * 5000}]}, "inits[0].pretrained"),
    ({**SPEC, "defaults": {"init_from": "c" * 300 + ".pt"}}, "defaults.init_from"),
])
def test_a_path_no_filesystem_takes_is_a_422_naming_it(client, spec, loc):
    """Too long for the filesystem (ENAMETOOLONG): was an unhandled OSError (500) in the confinement."""
    msg = problems(client.post("/experiments", json=spec))[loc]
    assert "is not a usable" in msg and "too long" in msg.lower()
    assert nothing_stored(client)


def test_another_teams_mlflow_experiment_is_refused(client, cluster):
    cluster.mlflow_experiments.add("team-b-study")   # made outside this service
    r = client.post("/experiments", json={**SPEC, "mlflow": {"experiment": "team-b-study"}})
    assert "was not created by this service" in problems(r)["mlflow.experiment"]
    mine = client.post("/experiments", json={**SPEC, "name": "a", "mlflow": {"experiment": "shared-a"}})
    assert mine.status_code == 202, mine.text
    cluster.mlflow_experiments.add("shared-a")
    again = client.post("/experiments", json={**SPEC, "name": "a", "seeds": 2, "mlflow": {"experiment": "shared-a"}})
    assert again.status_code == 202, again.text               # the same spec name may go on filling it
    other = client.post("/experiments", json={**SPEC, "name": "b", "mlflow": {"experiment": "shared-a"}})
    assert problems(other)["mlflow.experiment"] == ("MLflow experiment 'shared-a' holds the runs of another spec "
                                                    "submitted to this service (named 'a'; this one is 'b'); "
                                                    "choose another name")


def test_resources_no_node_has_are_refused_at_submit(client, cluster):
    r = client.post("/experiments", json={**SPEC, "resources": {"gpus": 1}})
    assert problems(r)["resources.gpus"] == ("each trial asks for 1 GPUs but no node has GPUs; the trials "
                                             "could never start")
    r = client.post("/experiments", json={**SPEC, "resources": {"cpus": 16}})
    assert "the largest node has 4 CPUs" in problems(r)["resources.cpus"]
    assert nothing_stored(client)
    cluster.nodes.append({"CPU": 16.0, "GPU": 2.0})
    assert client.post("/experiments", json={**SPEC, "resources": {"gpus": 1}}).status_code == 202


def test_one_answer_lists_the_bounds_the_resources_and_the_mlflow_experiment(client, cluster):
    # Each used to be a 422 of its own: the bounds first, then the resources and the experiment, so a
    # spec with all three took three submissions to learn what was wrong with it.
    cluster.mlflow_experiments.add("team-b-study")
    r = client.post("/experiments", json={**SPEC, "retries": 50, "resources": {"cpus": 16},
                                          "mlflow": {"experiment": "team-b-study"}})
    found = problems(r)
    assert "50 exceeds this service's limit of 10" in found["retries"]
    assert "the largest node has 4 CPUs" in found["resources.cpus"]
    assert "was not created by this service" in found["mlflow.experiment"]
    assert nothing_stored(client)


def test_four_gpu_specs_do_not_lock_everyone_out(client):
    for i in range(4):
        assert client.post("/experiments", json={**SPEC, "seeds": [i], "resources": {"gpus": 1}}).status_code == 422
    assert client.post("/experiments", json=SPEC).status_code == 202


@pytest.mark.parametrize("spec, loc, msg", [
    ({**SPEC, "defaults": {"epochs": 100000}}, "defaults.epochs", "100000 exceeds this service's limit of 1000"),
    ({**SPEC, "axes": {"d_model": [64, 1000000]}}, "axes.d_model[1]", "1000000 exceeds this service's limit of 4096"),
    ({**SPEC, "tasks": [{"task": "synthetic_lm", "layers": 1000}]}, "tasks[0].layers",
     "limit of 64 (setting max_layers)"),
    ({**SPEC, "search": {"method": "optuna", "num_samples": 2,
                 "space": {"epochs": {"low": 1, "high": 5000, "type": "int"}}}},
     "search.space.epochs.high", "5000 exceeds"),
    ({**SPEC, "resources": {"cpus": 0.001}}, "resources.cpus", "below this service's minimum of 0.25 CPUs"),
])
def test_bounds(client, spec, loc, msg):
    assert msg in problems(client.post("/experiments", json=spec))[loc]
    assert nothing_stored(client)


def test_a_value_beyond_a_bound_is_named_where_the_spec_sets_it(client):
    # The 422 named the field alone (`epochs`): with three tasks, which one? The docs promise a path.
    spec = {**SPEC, "tasks": ["synthetic_translation", {"task": "synthetic_lm", "epochs": 5000},
                              {"task": "synthetic_classification", "epochs": 3}]}
    assert problems(client.post("/experiments", json=spec)) == {
        "tasks[1].epochs": "5000 exceeds this service's limit of 1000 (setting max_epochs)"}
    assert nothing_stored(client)


def test_bounds_are_settings(make_client):
    client = make_client(max_epochs=5)
    r = client.post("/experiments", json={**SPEC, "defaults": {"epochs": 6}})
    assert "6 exceeds this service's limit of 5 (setting max_epochs)" in problems(r)["defaults.epochs"]


# ---- 6: validation cost ---------------------------------------------------------------------------------

def test_long_lists_are_refused_before_validation(client):
    body = json.dumps({**SPEC, "inits": ["xavier"] * 20000})
    assert len(body) > 150_000
    t0 = time.process_time()
    r = client.post("/experiments", content=body, headers={"content-type": "application/json"})
    spent = time.process_time() - t0
    assert problems(r) == {"inits": "has 20000 items; this service accepts at most 1000 per list"}
    assert len(r.content) < 1000
    # not a timing assertion on speed: a sanity bound, 30x above what the capped check costs
    assert spent < 3.0, spent


def test_a_refused_spec_with_a_huge_grid_is_not_planned(client):
    """A field problem beside axes of 1.2 million trials: the sizes of the valid part are not checked (its
    grid is beyond the trial limit), so the answer comes at once, saying model sizes were not checked."""
    spec = {**SPEC, "name": "bad name!", "axes": {"epochs": list(range(1, 201)), "layers": list(range(1, 61)),
                                                  "min_freq": list(range(1, 101))}}
    t0 = time.process_time()
    found = problems(client.post("/experiments", json=spec))
    spent = time.process_time() - t0
    assert set(found) == {"name", ""} and found[""].startswith("model sizes, ")
    assert spent < 3.0, spent   # a sanity bound: planning the grid takes minutes


def test_the_problem_list_is_capped(client):
    r = client.post("/experiments", json={**SPEC, "inits": [{"tgt": f"nosuch{i}"} for i in range(500)]})
    detail = r.json()["detail"]
    assert r.status_code == 422 and len(detail) == 53   # 50, how many more, the two notes of what was not checked
    assert detail[-3]["msg"].startswith("... and 450 more problems")
    assert detail[-1]["msg"].endswith("not checked until the problems above are fixed")
    assert len(r.content) < 20_000


def test_trusted_roots_reach_the_driver(tmp_path):
    from service.runner import RayRunner
    runner = RayRunner(trusted_roots=[tmp_path / "data", "rel"])
    assert runner.trusted_roots == [os.path.realpath(tmp_path / "data"), os.path.realpath("rel")]


# ---- 7: leftovers after crashes and cancels ----------------------------------------------------------------

def test_a_lost_driver_leaves_no_run_running_and_no_running_count(client, cluster):
    exp = client.post("/experiments", json={**SPEC, "seeds": 3}).json()
    driver = f"embinit-exp-{exp['id']}"
    runner = FakeRunner(cluster)
    runner.advance(driver, "running", running=1, finished=1, pending=1)
    keys = cluster.specs[driver]["keys"]
    cluster.mlflow.update({keys[0]: "finished", keys[1]: "running"})
    runner.lose(driver)  # the API and its local Ray were killed
    after = client.get(exp["status_url"]).json()
    assert after["status"] == "failed"
    assert cluster.mlflow[keys[1]] == "interrupted"     # the orphaned MLflow run was closed
    # the closed run was interrupted (its driver died, the trial did not fail), as `embinit run` closes it: it
    # and the trial never started are cancelled, as a cancel at that point reads; nothing running or pending
    assert after["counts"]["running"] == after["counts"]["pending"] == 0
    assert after["counts"]["failed"] == 0 and after["counts"]["cancelled"] == 2 and after["progress"] == 0.3333


def test_a_failed_experiment_counts_nothing_running(client, cluster):
    exp = client.post("/experiments", json={**SPEC, "seeds": 2}).json()
    FakeRunner(cluster).advance(f"embinit-exp-{exp['id']}", "failed", error="boom", running=1, finished=1)
    counts = client.get(exp["status_url"]).json()["counts"]
    # the trial it stopped did not fail of its own: cancelled (docs/deployment.md, counts and progress)
    assert counts["running"] == 0 and counts["failed"] == 0 and counts["cancelled"] == 1 and counts["finished"] == 1


def test_a_failed_experiment_counts_what_it_never_ran_as_cancelled(client, cluster):
    """A failed experiment will start nothing more: `pending` would promise that it runs, and `failed` would
    say those trials ran and failed (docs/deployment.md, counts and progress): what it stopped or never
    started counts as cancelled, as a cancelled one's does, its trial rows without a run read cancelled
    too, and progress counts only trials with an outcome."""
    exp = client.post("/experiments", json={**SPEC, "seeds": 4}).json()
    FakeRunner(cluster).advance(f"embinit-exp-{exp['id']}", "failed", error="boom", pending=2, running=1, finished=1)
    cluster.mlflow[cluster.specs[f"embinit-exp-{exp['id']}"]["keys"][0]] = "finished"
    after = client.get(exp["status_url"]).json()
    assert after["counts"] == {"pending": 0, "running": 0, "finished": 1, "failed": 0, "cancelled": 3}
    assert after["progress"] == 0.25
    rows = client.get(f"{exp['status_url']}/trials").json()["items"]
    assert [t["status"] for t in rows] == ["finished", "cancelled", "cancelled", "cancelled"]
    # a sweep's final counts leave out what has no finished run and did not fail: cancelled all the same
    exp = client.post("/experiments", json={**SPEC, "seeds": 3}).json()
    FakeRunner(cluster).advance(f"embinit-exp-{exp['id']}", "failed", error="boom", finished=1, failed=1)
    after = client.get(exp["status_url"]).json()
    assert after["counts"] == {"pending": 0, "running": 0, "finished": 1, "failed": 1, "cancelled": 1}
    assert after["progress"] == 0.6667


def test_a_lost_driver_reads_as_far_as_a_cancel_at_the_same_point(client, cluster):
    """Review M8: after a restart lost the driver, an experiment that had 2 of 6 trials finished, one
    running (MLflow: cancelled, as the trial tags itself when Tune stops it) and the rest never started read
    `failed` at 100% with 4 failed; the same experiment cancelled read 33%."""
    seen = {}
    for how in ("lost", "cancelled"):
        exp = client.post("/experiments", json={**SPEC, "seeds": 6, "description": how}).json()
        driver = f"embinit-exp-{exp['id']}"
        runner = FakeRunner(cluster)
        runner.advance(driver, "running", running=1, finished=2, pending=3)
        keys = cluster.specs[driver]["keys"]
        cluster.mlflow.update({keys[0]: "finished", keys[1]: "finished", keys[2]: "cancelled"})
        if how == "cancelled":
            client.delete(exp["status_url"])
        runner.lose(driver)
        after = client.get(exp["status_url"]).json()
        assert after["status"] == ("failed" if how == "lost" else "cancelled")
        seen[how] = (after["counts"], after["progress"])
    for counts, progress in seen.values():
        assert (counts["finished"], counts.get("failed", 0), counts["cancelled"], progress) == (2, 0, 4, 0.3333)
        assert counts["pending"] == counts["running"] == 0


def test_a_spec_the_driver_refuses_counts_its_trials_cancelled_not_pending(client, cluster):
    """A driver that fails before any trial starts (its `run_sweep` refused the spec) reports no counts, as
    the real one does: the experiment showed `failed` with the submission's `{pending: 1}`. None of its
    trials ran: cancelled, not failed, and progress 0."""
    import time

    from service.driver import DriverState
    exp = client.post("/experiments", json=SPEC).json()
    cluster.drivers[f"embinit-exp-{exp['id']}"] = DriverState(
        "failed", error="SpecError: invalid experiment spec (1 problem): ...", started_at=time.time(),
        finished_at=time.time())
    after = client.get(exp["status_url"]).json()
    assert after["status"] == "failed" and after["error"].startswith("SpecError: ")
    assert after["counts"] == {"pending": 0, "running": 0, "failed": 0, "cancelled": 1} and after["progress"] == 0
    rows = client.get(f"{exp['status_url']}/trials").json()["items"]
    assert [t["status"] for t in rows] == ["cancelled"]


def test_a_cancel_counts_what_it_stopped(client):
    exp = client.post("/experiments", json={**SPEC, "seeds": 3}).json()
    counts = client.delete(exp["status_url"]).json()["counts"]
    assert counts["cancelled"] == 3 and counts["running"] == counts["pending"] == 0
