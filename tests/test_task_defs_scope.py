"""One task name defined differently by two specs: the service checks two such specs at once, each against
its own definition (each request registers in a scope of its own, embinit.task_registry.scoped), and a
report over trials of both definitions reads each trial's metrics by its own definition, whichever was
registered last."""

from __future__ import annotations

import threading

import pytest

from embinit.config import TrialConfig
from embinit.report.rows import group, group_rows
from embinit.task_registry import DEFINED, TASKS, scoped, task_entry, unregister
from embinit.tracking.records import TrialRecord
from embinit.tracking.run_readers import trial_row

from test_task_defs import IMDB, REVIEWS, spec, write_csv

NLI = {"like": "mnli", "files": {"train": "train.csv", "dev_matched": "dev.csv", "dev_mismatched": "dev.csv"},
       "columns": ["premise", "hypothesis", "label"], "labels": ["yes", "maybe", "no"]}
PAIRS = [("a man sleeps", "a person rests", "yes"), ("a dog runs", "a cat sits", "no"),
         ("kids play", "children are outside", "maybe")]


@pytest.fixture(autouse=True)
def _forget_definitions():
    yield
    for name in list(DEFINED):
        unregister(name)


def test_a_scope_sees_its_own_definitions_and_no_others():
    TrialConfig(task="mine", task_def=IMDB)                        # the process's definition of "mine"
    assert task_entry("mine").primary == "best/val/acc"
    with scoped():
        assert "mine" not in TASKS and "mine" not in DEFINED and "sst2" in TASKS
        TrialConfig(task="mine", task_def=NLI)
        assert task_entry("mine").primary == "best/val/acc_matched" and set(DEFINED) == {"mine"}
        with scoped():
            assert "mine" not in TASKS
    assert task_entry("mine").primary == "best/val/acc"              # the process's, untouched
    assert list(TASKS)[-1] == "mine" and len(TASKS) == len(set(TASKS))


def test_two_specs_defining_one_name_differently_at_once_each_check_their_own(tmp_path, monkeypatch):
    """Both requests define and register "mine" before either checks its data folder: with one registry
    for the process, the request that registered first read the other's definition, found the other
    kind's files missing in its folder, and was refused (422)."""
    import service.specs
    from helpers.service import app_clients
    from service.fakes import FakeCluster
    from service.settings import Settings

    reviews, nli = tmp_path / "reviews", tmp_path / "nli"
    for folder, rows, header, names in ((reviews, REVIEWS, ("review", "sentiment"), ("train.csv", "dev.csv")),
                                        (nli, PAIRS, ("premise", "hypothesis", "label"), ("train.csv", "dev.csv"))):
        folder.mkdir()
        for name in names:
            write_csv(folder / name, rows * 4, header)
    both_defined = threading.Barrier(2, timeout=20)
    checked = service.specs.bound_problems

    def after_the_other_defined(*args, **kwargs):
        both_defined.wait()   # broken (an error) if the requests did not overlap
        return checked(*args, **kwargs)
    monkeypatch.setattr(service.specs, "bound_problems", after_the_other_defined)
    settings = Settings(database_url=f"sqlite:///{tmp_path}/state.db", tracking_uri=f"sqlite:///{tmp_path}/m.db",
                        data_roots=[tmp_path], pretrained_roots=[tmp_path], refresh_interval_s=0.0)
    answers: dict[str, tuple[int, object]] = {}
    with app_clients(FakeCluster()) as open_client:
        client = open_client(settings)

        def post(name: str, definition: dict, folder) -> None:
            r = client.post("/experiments", json=spec({"mine": definition}, [{"task": "mine", "data_dir": str(folder)}],
                                                      name=name))
            answers[name] = (r.status_code, r.json())
        threads = [threading.Thread(target=post, args=args) for args in (("reviews", IMDB, reviews), ("nli", NLI, nli))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not both_defined.broken
    assert {name: code for name, (code, _) in answers.items()} == {"reviews": 202, "nli": 202}, answers
    assert "mine" not in DEFINED   # nothing left in the process's registry


def _record(run: str, seed: int, definition: dict, metrics: dict) -> TrialRecord:
    config = TrialConfig(task="mine", seed=seed, task_def=definition).to_dict()
    return TrialRecord(run, f"key-{run}", "mine", "Xavier", "finished", config, metrics=metrics, seed=seed)


def test_a_report_over_two_definitions_of_a_name_reads_each_trials_metrics_by_its_own():
    reviews = [_record(f"r{s}", s, IMDB, {"best/val/acc": 0.8 + s / 100}) for s in range(2)]
    nli = [_record(f"n{s}", s, NLI, {"best/val/acc_matched": 0.5, "best/val/acc_mismatched": 0.4}) for s in range(2)]
    rows: list = []
    for gkey, members in group([*reviews, *nli]).items():   # made last, the NLI definition is the one registered
        group_rows(gkey, members, rows, {})
    by_metric = {r["metric"]: r for r in rows}
    assert sorted(by_metric) == ["best/val/acc", "best/val/acc_matched", "best/val/acc_mismatched"]
    assert by_metric["best/val/acc"]["n"] == 2 and by_metric["best/val/acc"]["mean"] == pytest.approx(0.805)
    assert by_metric["best/val/acc_matched"]["n"] == 2
    assert [trial_row(r)["value"] for r in (reviews[0], nli[0])] == [0.8, 0.5]
