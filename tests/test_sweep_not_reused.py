"""A spec edited since its experiment's trials finished (`epochs: 2` -> `3`): those trials' keys are not
planned, so they retrain; the dry run and the run's start say how many finished trials are not reused
and by which config fields they differ from the nearest planned trial (embinit.sweep.not_reused)."""

from __future__ import annotations

import pytest

from embinit.config import CODE_VERSION, TrialConfig
from embinit.spec import load_spec
from embinit.sweep.noop import noop_result
from embinit.sweep.not_reused import notice_lines
from embinit.tracking import mlflow_store
from embinit.tracking.records import TrialRecord
from embinit.tracking.trial_run import TrialRun


def _spec(uri: str, inits=("xavier",), **defaults):
    return load_spec({"name": "edited", "tasks": ["synthetic_classification"], "inits": list(inits), "seeds": 2,
                      "defaults": {"epochs": 2, **defaults}, "mlflow": {"tracking_uri": uri}})


def _finish_all(spec) -> None:
    """Every planned trial of `spec` finished in its store, as a sweep's worker writes one (no Ray)."""
    uri = spec.mlflow.tracking_uri
    exp_id = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    for p in spec.plan():
        cfg = TrialConfig.from_dict(p.config)
        run = TrialRun.open(uri, exp_id, None, p.config, p.key, p.label, {"axes": {}, "point": {}})
        run.finish(noop_result(cfg, p.label), [])


@pytest.fixture
def store(tmp_path) -> str:
    uri = f"sqlite:///{tmp_path}/m.db"
    _finish_all(_spec(uri))
    return uri


@pytest.mark.slow   # an MLflow store (SQLite), no Ray
def test_a_dry_run_names_the_changed_field_of_the_trials_it_does_not_reuse(store):
    from embinit.cli.dry_run import dry_run
    text = dry_run(_spec(store, epochs=3))
    assert ("2 finished trials of experiment 'edited' in this store are not reused: their config differs from "
            "this spec's in epochs (2 → 3)") in text, text
    text = dry_run(_spec(store, lr=0.002))   # an unset value is compared at the task's default
    assert "are not reused: their config differs from this spec's in lr (0.001 → 0.002)" in text, text


@pytest.mark.slow
def test_an_unchanged_spec_or_one_that_only_adds_an_init_says_nothing_of_it(store):
    """Every earlier trial is still planned (and reused): nothing to say, where an edit says it."""
    from embinit.cli.dry_run import dry_run
    edited = dry_run(_spec(store, epochs=1))
    assert "2 finished trials of experiment 'edited' in this store are not reused" in edited, edited
    for spec in (_spec(store), _spec(store, inits=("xavier", "normal"))):
        text = dry_run(spec)
        assert text.count("[finished: reused]") == 2 and "not reused" not in text, text


@pytest.mark.slow
def test_the_run_says_it_at_its_start(store, capsys):
    """The edited spec's own trials are finished too, so the run trains nothing (no Ray): it still says why
    the earlier ones were not reused."""
    from embinit.sweep import run_sweep
    edited = _spec(store, epochs=3)
    _finish_all(edited)
    result = run_sweep(edited, progress=True)
    assert result.reused == 2
    err = capsys.readouterr().err
    assert ("[embinit] 2 finished trials of experiment 'edited' in this store are not reused: their config "
            "differs from this spec's in epochs (2 → 3)") in err, err


def _record(i: int, cfg: dict) -> TrialRecord:
    c = TrialConfig.from_dict(cfg)
    return TrialRecord(run_id=f"r{i}", key=c.key(), task=c.task, label="Xavier", status="finished",
                       config=cfg, seed=c.seed, start_ms=i)


def test_hundreds_of_trials_are_grouped_by_their_differing_fields_and_the_listing_is_capped():
    spec = _spec("sqlite:///unused.db", epochs=3)
    plan = spec.plan()
    recs = [_record(i, {**plan[i % 2].config, "epochs": 2, "seed": i % 2, "lr": 1e-3 * (1 + i % 7),
                        "dropout": 0.05 * (i % 6), "batch_size": 8 + i % 5, "layers": 1 + i % 4})
            for i in range(300)]
    recs += [_record(1000, {**plan[0].config, "epochs": 2})]
    lines = notice_lines("edited", plan, recs)
    assert lines[0] == ("301 finished trials of experiment 'edited' in this store are not reused, by what differs "
                        "from the nearest planned trial:"), lines
    assert len(lines) == 6 and lines[-1].startswith("  and ") and "other combinations of fields" in lines[-1], lines
    assert all(len(line) < 400 for line in lines), lines
    assert sum(int(line.split(":")[0]) for line in lines[1:5]) + int(lines[-1].split()[1]) == 301, lines
    assert notice_lines("edited", plan, recs[-1:]) == [
        "1 finished trial of experiment 'edited' in this store is not reused: their config differs from this "
        "spec's in epochs (2 → 3)"]
    same = TrialRecord(**{**_record(1001, plan[0].config).__dict__, "key": "of-an-older-embinit"})
    assert notice_lines("edited", plan, [TrialRecord(**{**same.__dict__, "code_version": "1"})])[0].endswith(
        f"their config differs from this spec's in code_version (1 → {CODE_VERSION})")
    assert "their config equals this spec's, but their keys differ" in notice_lines("edited", plan, [same])[0]
    failed = [TrialRecord(**{**r.__dict__, "status": "failed"}) for r in recs]
    assert notice_lines("edited", plan, failed) == []   # resumed or reported elsewhere


def _own_task_spec(folder, description=None):
    from tests.test_task_defs import IMDB
    definition = {**IMDB, **({"description": description} if description else {})}
    return load_spec({"name": "own", "define_tasks": {"imdb": definition},
                      "tasks": [{"task": "imdb", "data_dir": str(folder)}], "inits": ["xavier"], "seeds": 2})


def _finished(plan) -> list[TrialRecord]:
    """Each planned trial finished, with the file digests its run tags (`embinit.sha256.<field>`)."""
    from embinit.file_inputs import content_ids
    return [TrialRecord(**{**_record(i, p.config).__dict__, "key": p.key, "file_digests": {
        name: cid.removeprefix("sha256:") for name, cid in content_ids(p.config).items()}})
            for i, p in enumerate(plan)]


def test_a_changed_file_is_named_by_its_content_never_by_a_field_outside_the_key(tmp_path):
    """Review M3: a copied data folder plus a `description` were reused (same bytes; the description is
    not in the key), but once a file in the copy changed, the notice blamed `data_dir` (the path) and
    `task_def` (the description): neither is the cause. It now compares as the key does: file inputs by
    content, the definition without its description."""
    import shutil
    from embinit.task_registry import DEFINED, unregister
    from tests.test_task_defs import imdb_folder, write_csv
    try:
        (tmp_path / "a").mkdir()
        first = imdb_folder(tmp_path / "a")
        recs = _finished(_own_task_spec(first.parent).plan())
        copy = tmp_path / "b"
        shutil.copytree(first.parent, copy)
        moved = _own_task_spec(copy, description="my reviews")
        assert {p.key for p in moved.plan()} == {r.key for r in recs}        # reused: nothing to say
        assert notice_lines("own", moved.plan(), recs) == []
        write_csv(copy / "imdb" / "train.csv", [("a changed sentence here", "positive")] * 24)
        lines = notice_lines("own", _own_task_spec(copy, description="my reviews").plan(), recs)
        assert len(lines) == 1 and lines[0].startswith(
            "2 finished trials of experiment 'own' in this store are not reused: their config differs from this "
            "spec's in the content of data_dir (..."), lines
        assert lines[0].endswith("_b0/a → ..." + str(copy)[-37:] + ")") and "task_def" not in lines[0], lines
        # at the same path: the content, at that path
        write_csv(first / "train.csv", [("another sentence", "negative")] * 24)
        lines = notice_lines("own", _own_task_spec(first.parent).plan(), recs)
        assert lines[0].endswith("differs from this spec's in the content of data_dir (..." + str(first.parent)[-37:]
                                 + ")"), lines
    finally:
        for name in list(DEFINED):
            unregister(name)


def test_long_values_alike_where_they_are_cut_are_shown_around_their_difference(tmp_path):
    """A value past 40 characters was cut (a path at its start, anything else at its end) whatever the other
    value was: two data folders with one long tail read as one path whose content changed, two task
    definitions alike in their first 37 characters read `{"columns": ... → {"columns": ...`. Now both are cut
    around their first difference."""
    import shutil
    from embinit.task_registry import DEFINED, unregister
    from tests.test_task_defs import IMDB, imdb_folder, write_csv

    def spec(folder, **definition):
        return load_spec({"name": "own", "define_tasks": {"imdb": {**IMDB, **definition}},
                          "tasks": [{"task": "imdb", "data_dir": str(folder)}], "inits": ["xavier"], "seeds": 2})
    tail = "shared-corpora/sentiment-reviews/english"
    try:
        first = tmp_path / "run-1" / tail
        first.mkdir(parents=True)
        imdb_folder(first)
        recs = _finished(spec(first).plan())
        second = tmp_path / "run-2" / tail
        shutil.copytree(first, second)
        write_csv(second / "imdb" / "train.csv", [("a changed sentence here", "positive")] * 24)
        (line,) = notice_lines("own", spec(second).plan(), recs)
        shown = line.partition("the content of data_dir (")[2]
        assert "/run-1/shared-corpora/" in shown.partition(" → ")[0], line
        assert "/run-2/shared-corpora/" in shown.partition(" → ")[2], line
        (line,) = notice_lines("own", spec(first, max_len=IMDB["max_len"] + 1).plan(), recs)
        assert f'"max_len": {IMDB["max_len"]}, ' in line and f'"max_len": {IMDB["max_len"] + 1}, ' in line, line
    finally:
        for name in list(DEFINED):
            unregister(name)


def test_floats_alike_to_six_digits_are_shown_in_full():
    plan = _spec("sqlite:///unused.db", lr=0.1234562).plan()
    (line,) = notice_lines("edited", plan, [_record(0, {**plan[0].config, "lr": 0.1234561})])
    assert line.endswith("differs from this spec's in lr (0.1234561 → 0.1234562)"), line
    (line,) = notice_lines("edited", plan, [_record(0, {**plan[0].config, "lr": 0.1})])
    assert line.endswith("differs from this spec's in lr (0.1 → 0.123456)"), line
