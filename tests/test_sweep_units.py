"""Sweep pieces that need no running Ray: progress counts and ETA, the stop flag, Optuna domains,
pre-flight path checks, and which run of a key counts."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace

import pytest
from ray import tune

from embinit.spec import Range, SpecError, load_spec
from embinit.sweep.optuna_search import domain
from embinit.sweep.progress import Progress
from embinit.tracking.records import TrialRecord, by_key
from embinit.sweep.run import _stop_fn, check_local_paths
from embinit.sweep.tune_run import StopAll


def trial(tid, last=None):
    return SimpleNamespace(trial_id=tid, last_result=last or {})


def test_progress_counts_and_eta():
    out = io.StringIO()
    p = Progress(total=10, reused=2, per_unit=1, every=1e9, stream=out)
    p.on_trial_start(0, [], trial("a"))
    p.on_trial_start(0, [], trial("b"))
    c = p.counts()
    assert (c["done"], c["running"], c["pending"], c["failed"], c["eta_s"]) == (2, 2, 6, 0, None)
    p.on_trial_complete(0, [], trial("a", {"embinit_failed": 0}))
    p.on_trial_error(0, [], trial("b"))
    c = p.counts()
    assert (c["done"], c["running"], c["pending"], c["failed"]) == (3, 0, 6, 1)
    assert c["eta_s"] is not None and c["eta_s"] >= 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("[embinit] 3/10 done (2 reused), 0 running, 6 pending, 1 failed")
    assert "elapsed" in lines[-1] and "ETA" in lines[-1]


def test_progress_units_with_several_seeds_and_a_sink():
    seen = []
    p = Progress(total=6, reused=0, per_unit=3, sink=seen.append)
    p.on_trial_start(0, [], trial("a"))
    assert seen[-1]["running"] == 3 and seen[-1]["pending"] == 3
    p.on_trial_complete(0, [], trial("a", {"embinit_failed": 1}))
    assert (seen[-1]["done"], seen[-1]["failed"]) == (2, 1)


def test_progress_counts_each_running_fused_group_s_members():
    """Fused groups of 4 and 3 and a lone trial: a running group counts as its members running, not as
    one trial beside members still "pending"."""
    seen = []
    p = Progress(total=8, reused=0, sink=seen.append, unit_sizes=[4, 3, 1])
    p.on_trial_start(0, [], SimpleNamespace(trial_id="g0", config={"unit": 0}, last_result={}))
    p.on_trial_start(0, [], SimpleNamespace(trial_id="g1", config={"unit": 1}, last_result={}))
    assert (seen[-1]["running"], seen[-1]["pending"]) == (7, 1)
    p.on_trial_complete(0, [], SimpleNamespace(trial_id="g0", config={"unit": 0},
                                               last_result={"embinit_trials": 4, "embinit_failed": 1}))
    p.on_trial_error(0, [], SimpleNamespace(trial_id="g1", config={"unit": 1}, last_result={}))
    assert (seen[-1]["done"], seen[-1]["failed"], seen[-1]["running"], seen[-1]["pending"]) == (3, 4, 0, 1)


def test_stop_flags():
    event = threading.Event()
    stop = StopAll(_stop_fn(event))
    assert not stop.stop_all() and not stop("t", {})
    event.set()
    assert stop.stop_all() and stop.fired
    assert _stop_fn(None)() is False
    assert StopAll(_stop_fn(lambda: True)).stop_all()


def test_optuna_domains():
    assert isinstance(domain([1, 2]), tune.search.sample.Categorical)
    log = domain(Range(low=1e-4, high=1e-2, log=True))
    assert isinstance(log, tune.search.sample.Float) and log.lower == 1e-4 and log.upper == 1e-2
    ints = domain(Range(low=2, high=4, type="int"))
    assert isinstance(ints, tune.search.sample.Integer) and (ints.lower, ints.upper) == (2, 5)


def test_preflight_paths(tmp_path):
    (tmp_path / "g.txt").write_text("a 1\n")
    ok = load_spec({"name": "p", "tasks": ["synthetic_translation"], "inits": ["glove", "bert"],
                    "pretrained": {"glove": str(tmp_path / "g.txt"), "bert": "bert-base-uncased"},
                    "cache_dir": str(tmp_path / "not-yet")})
    check_local_paths(ok)  # an existing file, a hub id, a cache folder made on demand
    bad = load_spec({"name": "p", "tasks": [{"task": "multi30k", "data_dir": str(tmp_path / "none")}],
                     "inits": ["xavier"]})
    with pytest.raises(SpecError, match=r"tasks\[0\].data_dir: .*does not exist"):
        check_local_paths(bad)


def test_a_finished_run_beats_later_failed_attempts():
    rows = [{"key": "a", "status": "finished"}, {"key": "a", "status": "failed"},
            {"key": "b", "status": "failed"}, {"key": "b", "status": "cancelled"}]
    recs = [TrialRecord(f"run{i}", r["key"], "t", "L", r["status"], start_ms=i) for i, r in enumerate(rows)]
    assert {k: r.status for k, r in by_key(recs).items()} == {"a": "finished", "b": "failed"}


def test_stopper_and_progress_pickle_without_their_live_parts():
    import pickle
    event = threading.Event()
    stop = pickle.loads(pickle.dumps(StopAll(_stop_fn(event))))
    assert stop.stop_all() is False
    p = Progress(total=1, reused=0, sink=lambda c: None, stream=io.StringIO())
    q = pickle.loads(pickle.dumps(p))
    assert q.sink is None and q.stream is None and q.total == 1


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _epoch(p, tid, epoch, best, epochs=6):
    p.on_trial_result(0, [], trial(tid), {"embinit_epoch": epoch, "embinit_epochs": epochs, "embinit_best": best})


def test_progress_table_per_running_trial(monkeypatch):
    """Piped: plain lines, the running trials' epoch, best-so-far and ETA under each periodic line."""
    out = io.StringIO()
    p = Progress(total=4, reused=0, every=0.0, stream=out)
    p.on_trial_start(0, [], trial("a"))
    p.on_trial_start(0, [], trial("b"))
    _epoch(p, "a", 2, 41.5)
    _epoch(p, "b", 1, float("nan"))
    last = out.getvalue().split("[embinit]")[-1].splitlines()
    assert last[0].startswith(" 0/4 done") and last[1].split() == ["running", "trial", "epoch", "best", "ETA"]
    # (no metric named here; the sweep names it: "best val/loss", tests/test_sweep_eta.py)
    row_a, row_b = last[2].split(), last[3].split()
    assert row_a[-3:-1] == ["2/6", "41.5"] and row_a[-1] != "?"
    assert row_b[-3:] == ["1/6", "-", row_b[-1]]
    p.on_trial_complete(0, [], trial("a", {"embinit_failed": 0}))
    assert [t.epoch for t in p.trials.values()] == [1]  # a finished trial leaves the table
    assert out.getvalue().splitlines()[-1].startswith("[embinit] 1/4 done")  # state changes: one line


def test_progress_table_is_redrawn_in_place_on_a_terminal(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    out = _Terminal()
    p = Progress(total=2, reused=0, every=0.0, stream=out)
    p.on_trial_start(0, [], trial("a"))  # 3 lines: counts, header, the trial
    _epoch(p, "a", 1, 10.0, epochs=3)
    second = out.getvalue().split("\n", 3)[3]
    assert second.startswith("\x1b[3F\x1b[J[embinit] 0/2 done")  # up 3 lines, clear, redraw
    assert "1/3" in second and "10" in second
    monkeypatch.setenv("TERM", "dumb")
    p.emit(force=True)
    assert "\x1b" not in out.getvalue().rsplit("\x1b[J", 1)[1]


def test_work_records_survive_pickling():
    """Units and the sweep context travel to Ray workers through pickle: typed records, equal after."""
    import pickle
    from embinit.sweep.work import SweepContext, Unit, units_to_run
    spec = load_spec({"name": "p", "tasks": ["synthetic_classification"], "inits": ["xavier"], "seeds": 2,
                      "search": {"method": "grid", "space": {"lr": [1e-3, 2e-3]}}})
    units, reused = units_to_run(spec, {spec.plan()[0].key})
    assert reused == 1 and len(units) == 3 and all(isinstance(u, Unit) for u in units)
    ctx = SweepContext("sqlite:///x.db", "1", "parent", search_keys=("lr",))
    assert pickle.loads(pickle.dumps((units, ctx))) == (units, ctx)
    item = units[0].trials[0].at_point({"lr": 5e-3})
    assert item.config["lr"] == 5e-3 and item.group() == {"axes": {}, "point": {"lr": 5e-3},
                                                          "selection": ["val/acc", "max"]}


def test_unit_names_say_how_many_trials_a_unit_holds():
    from embinit.sweep.tune_run import unit_name
    from embinit.sweep.work import Unit, WorkItem
    items = tuple(WorkItem({"seed": s}, "Xavier", {}, {}, ("val/acc", "max"), f"{s}" * 16) for s in range(3))
    assert unit_name(Unit(items[:1])) == "Xavier-s0-00000000"
    assert unit_name(Unit(items, fused=True)) == "fused3-Xavier-s0-00000000"
    assert unit_name(Unit(items[1:])) == "2x-Xavier-s1-11111111"


def test_the_running_trials_table_names_a_trial_as_its_mlflow_run():
    """The progress table (and the service's status) named two trials of the blog's emb_seed axis alike,
    `Xavier-s1-<key>`: Tune's trial name is now the MLflow run's name (axes, search point, task) and key; its
    folder keeps the plain name."""
    from embinit.sweep.progress import Progress
    from embinit.sweep.tune_run import unit_name, unit_names, unit_title
    from embinit.sweep.work import Unit, WorkItem
    from embinit.tracking.run_names import trial_run_name

    def item(emb_seed, key, point=None, task=None):
        return WorkItem({"seed": 1}, "Xavier", {"emb_seed": emb_seed}, point or {}, ("val/bleu", "max"), key * 16,
                        name_task=task)
    units = [Unit((item(3, "a"),)), Unit((item(4, "b"),)), Unit((item(3, "c", {"lr": 0.001}, "mnli"), item(5, "d")))]
    assert unit_title(units[0]) == f"{trial_run_name('Xavier', 1, {'emb_seed': 3})} [aaaaaaaa]"
    assert [unit_title(u) for u in units] == ["Xavier-s1 emb_seed=3 [aaaaaaaa]", "Xavier-s1 emb_seed=4 [bbbbbbbb]",
                                              "2x Xavier-s1 emb_seed=3,lr=0.001 (mnli) [cccccccc]"]
    assert unit_name(units[0]) == "Xavier-s1-aaaaaaaa"   # Tune's folder: no spaces, no value's `/`
    clock = iter(range(100))
    progress = Progress(total=4, reused=0, clock=lambda: float(next(clock)), metric="val/bleu")
    with unit_names("blog", units) as (names, folders):
        for i in range(2):
            trial = type("Trial", (), {"config": {"unit": i}, "trial_id": str(i), "__str__": lambda t: names(t)})()
            progress.on_trial_start(0, [], trial)
    table = "\n".join(progress.table())
    assert "Xavier-s1 emb_seed=3 [aaaaaaaa]" in table and "Xavier-s1 emb_seed=4 [bbbbbbbb]" in table
    assert [t["trial"] for t in progress.counts()["trials"]] == [unit_title(u) for u in units[:2]]
