"""A spec whose `d_model` or `heads` cannot fit its local pretrained sources is refused at plan time
(embinit.model_dims): by `run_sweep` before anything is written to MLflow, and by the service with a
422 naming each problem, instead of every trial failing when it starts. Sources named by a hub id are
left to the trials; the check reads only headers and first lines, and never imports torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.files import write

from embinit.model_dims import dimension_problems, nearest_heads, resolve_model_size
from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.spec import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[1]


def vectors(path: Path, dim: int, words=("the", "cat", "sat")) -> str:
    write(path, [w + " " + " ".join(f"0.{i + 1}" for i in range(dim)) for w in words])
    return str(path)


def spec(tmp_path, task="synthetic_classification", **values) -> dict:
    return {"name": "dims", "tasks": [{"task": task, **values.pop("task_values", {})}], "seeds": 2,
            "mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/mlflow.db"}, **values}


def problems_of(data: dict) -> list[tuple[str, str]]:
    return dimension_problems(load_spec(data).plan())


def test_a_d_model_that_differs_from_a_local_source_is_one_problem_naming_its_trials(tmp_path):
    glove = vectors(tmp_path / "glove8.txt", 8)
    data = spec(tmp_path, inits=["xavier", {"tgt": "glove", "pretrained": glove}], task_values={"d_model": 16})
    (problem,) = problems_of(data)
    where, msg = problem
    assert where == "trials synthetic_classification x GloVe"          # two seeds, one problem
    assert "the init has dimension 8 but the model's d_model is 16" in msg
    assert "set `d_model` to the source's D or leave it out" in msg
    data["tasks"][0].pop("d_model")                                          # D taken from the source
    assert problems_of(data) == []
    data["tasks"][0]["d_model"] = 8
    assert problems_of(data) == []


def test_heads_that_do_not_divide_the_sources_d(tmp_path):
    glove = vectors(tmp_path / "glove6.txt", 6)
    data = spec(tmp_path, inits=[{"tgt": "glove", "pretrained": glove}], task_values={"heads": 4})
    assert [m for _, m in problems_of(data)] == ["heads=4 does not divide d_model=6; choose heads from [1, 2, 3, 6]"]
    data["tasks"][0].pop("heads")             # left at the task default: the nearest divisor is used
    assert problems_of(data) == []


def test_a_d_model_axis_names_only_the_values_that_do_not_fit(tmp_path):
    glove = vectors(tmp_path / "glove8.txt", 8)
    data = spec(tmp_path, inits=[{"tgt": "glove", "pretrained": glove}], axes={"d_model": [8, 12, 16]})
    msgs = sorted(m for _, m in problems_of(data))
    assert len(msgs) == 2 and "d_model is 12" in msgs[0] and "d_model is 16" in msgs[1]


def test_translation_sides_that_disagree(tmp_path):
    tgt, src = vectors(tmp_path / "en8.txt", 8), vectors(tmp_path / "de6.txt", 6)
    data = spec(tmp_path, task="synthetic_translation",
                inits=[{"tgt": "glove", "pretrained": tgt, "src": "glove", "src_pretrained": src}])
    (problem,) = problems_of(data)
    assert "the pretrained sources disagree on the embedding dimension" in problem[1]
    assert "'src': 6" in problem[1] and "'tgt': 8" in problem[1]


def test_a_local_source_that_cannot_be_read_is_named(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    data = spec(tmp_path, inits=[{"tgt": "glove", "pretrained": str(empty)}])
    (problem,) = problems_of(data)
    assert f"pretrained file is empty: {empty}" in problem[1]


def test_hub_ids_and_random_inits_are_left_to_the_trials(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = spec(tmp_path, inits=["xavier", "bert"], task_values={"d_model": 16})
    assert problems_of(data) == []           # bert-base-uncased is a hub id: not read here


def test_resolve_model_size_is_the_trainers_rule():
    cfg = TrialConfig(task="synthetic_classification", init="glove", d_model=None, heads=None).resolved()
    assert resolve_model_size(cfg, None, {"tok": 300}) == (300, nearest_heads(300, cfg.heads))
    assert nearest_heads(300, 8) == 10 and nearest_heads(50, 4) == 5
    with pytest.raises(EmbinitError, match="dimension 300 but the model's d_model is 64"):
        resolve_model_size(TrialConfig(task="synthetic_classification", init="glove", d_model=64).resolved(),
                           None, {"tok": 300})


def test_a_d_model_the_source_contradicts_and_heads_that_divide_neither_are_both_named(tmp_path):
    glove = vectors(tmp_path / "glove50.txt", 50)
    data = spec(tmp_path, inits=[{"tgt": "glove", "pretrained": glove}], task_values={"d_model": 64, "heads": 7})
    (problem,) = problems_of(data)
    assert problem[1] == ("the init has dimension 50 but the model's d_model is 64; set `d_model` to the source's D "
                          "or leave it out (the source's D is used); heads=7 does not divide d_model=64; choose heads "
                          "from [1, 2, 4, 8, 16, 32, 64] (or, with d_model left out, from [1, 2, 5, 10, 25, 50])")
    data["tasks"][0]["heads"] = 5             # divides the source's D: no hint for d_model left out
    assert [m for _, m in problems_of(data)] == [
        "the init has dimension 50 but the model's d_model is 64; set `d_model` to the source's D or leave it out "
        "(the source's D is used); heads=5 does not divide d_model=64; choose heads from [1, 2, 4, 8, 16, 32, 64]"]


def test_both_sides_of_one_source_contradicting_d_model_are_said_once(tmp_path):
    """GloVe on both tables of a translation task: one sentence for the two sides, not the same one twice."""
    glove = vectors(tmp_path / "glove8.txt", 8)
    data = spec(tmp_path, task="synthetic_translation", inits=[{"tgt": "glove", "pretrained": glove}],
                task_values={"d_model": 16})
    assert [m for _, m in problems_of(data)] == [
        "the target init and the source init have dimension 8 but the model's d_model is 16; set `d_model` to "
        "their D or leave it out (their D is used)"]


@pytest.mark.slow
def test_run_sweep_refuses_before_writing_anything(tmp_path):
    from embinit.sweep import run_sweep
    glove = vectors(tmp_path / "glove8.txt", 8)
    data = spec(tmp_path, inits=[{"tgt": "glove", "pretrained": glove}], task_values={"d_model": 16, "epochs": 1})
    with pytest.raises(SpecError) as err:
        run_sweep(load_spec(data), progress=False)
    assert "the init has dimension 8 but the model's d_model is 16" in str(err.value)
    assert not (tmp_path / "mlflow.db").exists()      # no store, no experiment, no sweep run


def test_the_service_answers_422_with_each_problem(tmp_path):
    from fastapi.testclient import TestClient  # noqa: F401 (the service's test client needs it)
    from helpers.service import app_clients

    from service.fakes import FakeCluster
    from service.settings import Settings
    pre = tmp_path / "pretrained"
    vectors(pre / "glove8.txt", 8)
    vectors(pre / "glove6.txt", 6)
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        data_roots=[tmp_path], pretrained_roots=[pre], refresh_interval_s=0.0)
    body = {"name": "dims-svc", "tasks": [{"task": "synthetic_classification", "d_model": 8}], "seeds": 1,
            "inits": [{"tgt": "glove", "pretrained": "glove8.txt"}, {"tgt": "glove", "pretrained": "glove6.txt",
                                                                      "label": "glove6"}]}
    with app_clients(FakeCluster()) as open_client:
        client = open_client(settings)
        r = client.post("/experiments", json=body)
        assert r.status_code == 422, r.text
        (problem,) = r.json()["detail"]
        # at the field to fix, as the API promises (it used to be the trials'), naming the trials
        assert problem["loc"] == "tasks[0].d_model"
        assert problem["msg"].startswith("trials synthetic_classification x glove6: the init has dimension 6 but "
                                         "the model's d_model is 8")
        body["inits"].pop()
        assert client.post("/experiments", json=body).status_code == 202


def test_the_check_imports_no_torch():
    code = ("import sys, embinit.model_dims, embinit.init.source_files, service.specs; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_an_optuna_search_is_checked_for_every_value_it_may_draw(tmp_path):
    glove = vectors(tmp_path / "glove6.txt", 6)
    search = {"method": "optuna", "num_samples": 4, "space": {"d_model": [6, 12], "lr": {"low": 1e-4, "high": 1e-2}}}
    data = spec(tmp_path, inits=[{"tgt": "glove", "pretrained": glove}], search=search)
    (problem,) = dimension_problems(load_spec(data).plan(), load_spec(data).search)
    assert "the init has dimension 6 but the model's d_model is 12" in problem[1]
    assert problems_of(data) == []                      # the plan alone does not hold the drawn values
    search["space"] = {"heads": {"low": 1, "high": 4, "type": "int"}}
    msgs = sorted(m for _, m in dimension_problems(load_spec(data).plan(), load_spec(data).search))
    assert msgs == ["heads=4 does not divide d_model=6; choose heads from [1, 2, 3, 6]"]
    search["space"] = {"heads": [1, 2, 3]}
    assert dimension_problems(load_spec(data).plan(), load_spec(data).search) == []


def test_a_wide_integer_range_is_checked_at_its_ends_and_spread_points():
    from embinit.model_dims import MAX_SEARCHED_VALUES, _space_values
    from embinit.spec.models import Range
    wide = _space_values(Range(low=1, high=100_000, type="int"))
    assert wide[0] == 1 and wide[-1] == 100_000 and len(wide) <= MAX_SEARCHED_VALUES + 1
    assert _space_values(Range(low=2, high=5, type="int")) == [2, 3, 4, 5]
    assert _space_values(Range(low=0.5, high=2.0)) == [0.5, 2.0]
    assert _space_values([8, 16]) == [8, 16] and _space_values(None) == []


def test_a_d_model_problem_is_said_where_the_spec_sets_it(tmp_path):
    """At the one place that sets the d_model of the trials concerned (an axis value, the defaults), else,
    where they take it from two places, at the trials."""
    from embinit.spec.full_check import spec_problems
    vectors(tmp_path / "g3.txt", 3)
    base = {"name": "d", "seeds": 1, "inits": [{"tgt": "glove", "pretrained": str(tmp_path / "g3.txt")}]}
    for extra, loc in (({"tasks": ["synthetic_classification"], "axes": {"d_model": [3, 16]}}, "axes.d_model[1]"),
                       ({"tasks": ["synthetic_classification"], "defaults": {"d_model": 16}}, "defaults.d_model"),
                       ({"tasks": [{"task": "synthetic_classification", "d_model": 16}, "synthetic_lm"],
                         "defaults": {"d_model": 16}},
                        "trials synthetic_classification x GloVe, synthetic_lm x GloVe")):
        [(where, why)] = spec_problems({**base, **extra})[1]
        assert where == loc and "dimension 3 but the model's d_model is 16" in why


def test_the_dry_run_refuses_what_run_would(tmp_path, capsys):
    from embinit.cli import main
    vectors(tmp_path / "g3.txt", 3)
    path = tmp_path / "s.yaml"
    path.write_text("name: d\ntasks: [{task: synthetic_classification, d_model: 16}]\n"
                    "inits: [xavier, {tgt: glove, pretrained: ./g3.txt}]\nseeds: 2\n")
    assert main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("embinit: error: invalid experiment spec (1 problem): tasks[0].d_model: "
                          "trials synthetic_classification x GloVe: ")
    assert "the init has dimension 3 but the model's d_model is 16" in err
    path.write_text(path.read_text().replace(", d_model: 16", ""))
    assert main(["run", str(path), "--dry-run"]) == 0
    assert "4 trials" in capsys.readouterr().out


def test_the_dry_run_refuses_a_missing_file_as_run_would(tmp_path, capsys):
    from embinit.cli import main
    path = tmp_path / "s.yaml"
    path.write_text("name: d\ntasks: [synthetic_classification]\n"
                    "inits: [xavier, {tgt: glove, pretrained: ./g100.txt}]\nseeds: 1\n")
    assert main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "inits[1].pretrained" in err and "g100.txt' does not exist" in err
    vectors(tmp_path / "g100.txt", 4)
    assert main(["run", str(path), "--dry-run"]) == 0
