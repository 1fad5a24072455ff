"""A search's trials in MLflow's run table say whether their point is the one the report reports
(embinit.report.point_tags): a trial of a point the report did not choose no longer looks like a final
result, and `tags.embinit.search_point = 'selected'` in the UI's search box shows the report's trials."""

from __future__ import annotations

import pytest

from embinit.report.point_tags import point_tags
from embinit.report.table import build_report
from embinit.spec import load_spec
from embinit.tracking import mlflow_store, records
from embinit.tracking.records import SEARCH_NOTE_TAG, SEARCH_POINT_TAG, TrialRecord
from helpers.sweep import sweep_spec_data


def _trial(key, label, seed, loss, point, status="finished"):
    group = {"axes": {}, "point": point, "selection": ["val/loss", "min"]}
    return TrialRecord(key, key, "multi30k", label, status, {"task": "multi30k", "init": label.lower(),
                                                             "seed": seed, "epochs": 4, **point},
                       group, {"best_epoch": 2, "best/val/loss": loss, "test/bleu": 30.0}, seed)


def test_the_reported_point_is_selected_and_the_others_are_not():
    hot, cool = {"lr": 1e-3}, {"lr": 1e-4}
    trials = [_trial("x-hot0", "Xavier", 0, 1.0, hot), _trial("x-hot1", "Xavier", 1, 1.2, hot),
              _trial("x-cool0", "Xavier", 0, 2.0, cool), _trial("x-cool1", "Xavier", 1, 2.2, cool),
              _trial("g-hot0", "GloVe", 0, 3.0, hot), _trial("g-cool0", "GloVe", 0, 2.5, cool)]
    tags = point_tags(trials, "grid #2")
    rows = {r["init"]: r["point"] for r in build_report("t", chosen={t.key: t for t in trials}, planned=[]).rows}
    assert rows == {"Xavier": hot, "GloVe": cool}
    for t in trials:
        want = "selected" if t.point == rows[t.label] else "not selected"
        assert tags[t.run_id][SEARCH_POINT_TAG] == want, t.key
    assert tags["x-cool0"][SEARCH_NOTE_TAG] == (
        "grid #2 reports Xavier (multi30k) at lr=0.001, of 2 points: the best mean best/val/loss (min) over its "
        "seeds, among the points that lost the fewest seeds")


def test_a_point_whose_seeds_diverged_is_not_selected_and_trials_without_a_search_get_no_tag():
    hot, cool = {"lr": 1e-2}, {"lr": 1e-4}
    trials = [_trial("h0", "Xavier", 0, 0.5, hot), _trial("h1", "Xavier", 1, None, hot, "diverged"),
              _trial("c0", "Xavier", 0, 2.0, cool), _trial("c1", "Xavier", 1, 2.0, cool)]
    trials[1] = TrialRecord(**{**trials[1].__dict__, "metrics": {}})
    tags = point_tags(trials + [_trial("solo", "GloVe", 0, 1.0, {})], "grid #1")
    assert {k: v[SEARCH_POINT_TAG] for k, v in tags.items()} == {
        "h0": "not selected", "h1": "not selected", "c0": "selected", "c1": "selected"}


@pytest.mark.slow
def test_a_sweep_tags_its_search_trials_as_its_report_chose(ray_local, tmp_path):
    from embinit.sweep import run_sweep
    spec = load_spec(sweep_spec_data("pts", tmp_path, {"task": "synthetic_translation", "epochs": 2},
                                     inits=["xavier", "normal"], seeds=[0, 1], execution={"trainer": "noop"},
                                     search={"method": "grid", "space": {"lr": [1e-3, 3e-3]},
                                             "metric": "val/loss", "mode": "min"}))
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    result = run_sweep(spec, progress=False)
    exp = mlflow_store.experiment_id("pts", uri)
    trials = [r for r in mlflow_store.search_runs(exp, uri) if records.KEY_TAG in r.data.tags]
    assert len(trials) == 8
    reported = {r["init"]: r["point"] for r in result.report.rows}
    for run in trials:
        label, point = run.data.tags[records.LABEL_TAG], {"lr": float(run.data.params["lr"])}
        assert run.data.tags[SEARCH_POINT_TAG] == ("selected" if point == reported[label] else "not selected")
        assert run.data.tags[SEARCH_NOTE_TAG].startswith(f"pts #1 reports {label} (synthetic_translation) at lr=")
    # what the UI's search box sends: the report's trials, and only those
    selected = mlflow_store.search_runs(exp, uri, f"tags.`{SEARCH_POINT_TAG}` = 'selected'")
    assert sorted(r.info.run_id for r in selected) == sorted(i for ids in result.report.run_ids.values() for i in ids)
