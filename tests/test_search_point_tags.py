"""A search's trials in MLflow's run table say whether their point is the one the report reports
(embinit.report.point_tags): a trial of a point the report did not choose no longer looks like a final
result, and `tags.embinit.search_point = 'selected'` in the UI's search box shows the report's trials."""

from __future__ import annotations

import pytest

from embinit.report.point_tags import cell_tags, point_tags
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
    tags = point_tags(trials)
    rows = {r["init"]: r["point"] for r in build_report("t", chosen={t.key: t for t in trials}, planned=[]).rows}
    assert rows == {"Xavier": hot, "GloVe": cool}
    for t in trials:
        want = "selected" if t.point == rows[t.label] else "not selected"
        assert tags[t.run_id][SEARCH_POINT_TAG] == want, t.key
    assert tags["x-cool0"][SEARCH_NOTE_TAG] == (
        "Xavier (multi30k) is reported at lr=0.001, of 2 points: the best mean best/val/loss (min) over its seeds, "
        "among the points that lost the fewest seeds")
    # a run that holds its tags already is not written again
    held = [TrialRecord(**{**t.__dict__, "shown": tags[t.run_id]}) for t in trials]
    assert point_tags(held) == {}


def test_a_point_whose_seeds_diverged_is_not_selected_and_trials_without_a_search_get_no_tag():
    hot, cool = {"lr": 1e-2}, {"lr": 1e-4}
    trials = [_trial("h0", "Xavier", 0, 0.5, hot), _trial("h1", "Xavier", 1, None, hot, "diverged"),
              _trial("c0", "Xavier", 0, 2.0, cool), _trial("c1", "Xavier", 1, 2.0, cool)]
    trials[1] = TrialRecord(**{**trials[1].__dict__, "metrics": {}})
    tags = point_tags(trials + [_trial("solo", "GloVe", 0, 1.0, {})])
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
        assert run.data.tags[SEARCH_NOTE_TAG].startswith(f"{label} (synthetic_translation) is reported at lr=")
    # what the UI's search box sends: the report's trials, and only those
    selected = mlflow_store.search_runs(exp, uri, f"tags.`{SEARCH_POINT_TAG}` = 'selected'")
    assert sorted(r.info.run_id for r in selected) == sorted(i for ids in result.report.run_ids.values() for i in ids)


def _cell_trial(key, label, seed, epochs, cell, point=None):
    t = _trial(key, label, seed, 1.0, point or {})
    return TrialRecord(**{**t.__dict__, "config": {**t.config, "epochs": epochs},
                          "shown": {records.CELL_TAG: cell} if cell else {}})


def test_trials_of_one_init_run_with_other_settings_get_the_cells_of_their_report_rows():
    trials = [_cell_trial("a3", "Xavier", 0, 3, "Xavier lr=0.001 (multi30k)", {"lr": 1e-3}),
              _cell_trial("a4", "Xavier", 0, 4, "Xavier lr=0.001 (multi30k)", {"lr": 1e-3}),
              _cell_trial("b4", "Xavier", 1, 4, "Xavier lr=0.001 {epochs=4} (multi30k)", {"lr": 1e-3}),  # set before
              _cell_trial("old", "Xavier", 1, 3, None, {"lr": 1e-3}),   # a run from before the cell tag
              _cell_trial("g", "GloVe", 0, 3, "GloVe (multi30k)")]     # one setting: left as it is
    assert cell_tags(trials) == {"a3": "Xavier lr=0.001 {epochs=3} (multi30k)",
                                 "a4": "Xavier lr=0.001 {epochs=4} (multi30k)",
                                 "old": "Xavier lr=0.001 {epochs=3} (multi30k)"}
    rows = build_report("t", chosen={t.key: t for t in trials}, planned=[]).rows
    assert sorted(r["setting"]["epochs"] for r in rows if r["init"] == "Xavier") == [3, 4]
    # a search's note names the row as the report does
    other = _cell_trial("c4", "Xavier", 0, 4, None, {"lr": 1e-4})
    assert point_tags(trials + [other])["c4"][records.SEARCH_NOTE_TAG].startswith(
        "Xavier {epochs=4} (multi30k) is reported at lr=0.001, of 2 points")


@pytest.mark.slow
def test_a_spec_run_again_with_more_epochs_groups_in_mlflow_as_its_report_rows(ray_local, tmp_path):
    """Seen in the walkthrough: after `epochs: 3` -> `4`, MLflow's "Group by embinit.cell" averaged the
    3- and 4-epoch seeds (Xavier 29.46) where `embinit report` has a row each (19.67, 39.26)."""
    import statistics

    from embinit.sweep import run_sweep
    for epochs in (2, 3):
        spec = load_spec(sweep_spec_data("cells", tmp_path, {"task": "synthetic_translation", "epochs": epochs},
                                         inits=["xavier"], seeds=[0, 1], execution={"trainer": "noop"}))
        run_sweep(spec, progress=False)
    uri = mlflow_store.resolve_uri(spec.mlflow.tracking_uri)
    runs = mlflow_store.search_runs(mlflow_store.experiment_id("cells", uri), uri, "tags.`embinit.trial_key` LIKE '%'")
    cells: dict[str, list] = {}
    for r in runs:
        cells.setdefault(r.data.tags[records.CELL_TAG], []).append(r)
    report = build_report("cells", uri)
    assert sorted(cells) == ["Xavier {epochs=2} (synthetic_translation)", "Xavier {epochs=3} (synthetic_translation)"]
    for row in report.rows:
        members = cells[f"Xavier {{epochs={row['setting']['epochs']}}} (synthetic_translation)"]
        assert row["mean"] == pytest.approx(statistics.fmean(r.data.metrics[row["metric"]] for r in members))
