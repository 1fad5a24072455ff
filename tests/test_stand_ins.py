"""Which run stands for a slot: one rule (`records.stand_ins`), read by the trial key (`by_key`), the
report's (search point, seed), completeness's planned trial and the reproduction's seed. No MLflow."""

from __future__ import annotations

from embinit.report import completeness, rows as report_rows
from embinit.tracking import records
from embinit.reproduction.data import ReproductionData
from embinit.reproduction.inputs import Group, Trial


def _rec(run_id, key, status, start, seed=0, resume=None):
    return Trial(run_id, key, "multi30k", "GloVe", status, {"seed": seed}, {"axes": {}, "point": {}},
                 seed=seed, start_ms=start, resume_epoch=resume)


def test_the_rule_status_then_resumable_then_newest():
    recs = [_rec("fin-old", "a", "finished", 1), _rec("fail", "a", "failed", 5), _rec("run", "b", "running", 2),
            _rec("fail-kept", "b", "failed", 3, resume=4), _rec("cancel", "c", "cancelled", 0),
            _rec("fail-new", "c", "failed", 6), _rec("fail-kept-old", "c", "failed", 1, resume=2)]
    chosen = records.stand_ins(recs)
    assert {k: r.run_id for k, r in chosen.items()} == {"a": "fin-old", "b": "run", "c": "fail-kept-old"}
    assert list(chosen) == ["c", "a", "b"]                       # slots in the order of their oldest run
    # among equal ranks the newest; of equal starts the later in the input
    tie = [_rec("first", "k", "failed", 7), _rec("second", "k", "failed", 7), _rec("older", "k", "failed", 3)]
    assert records.stand_ins(tie)["k"].run_id == "second"
    assert records.by_key(recs, {"a"}) == {"a": chosen["a"]}
    by_seed = records.stand_ins(recs, lambda r: r.seed)
    assert list(by_seed) == [0] and by_seed[0].run_id == "fin-old"   # finished beats every other status



def test_an_interruption_after_a_failure_speaks_for_the_key():
    """Failed and interrupted rank alike, so the newer attempt stands: a key whose run failed and whose
    next attempt was interrupted (its sweep stopped, its driver lost; a rerun resumes it) shows
    `interrupted`, not the old failure's error; the other way round the newer failure stands. A
    resumable run still beats one that is not, and a cancellation stays below both."""
    recs = [_rec("fail-old", "a", "failed", 1), _rec("intr-new", "a", "interrupted", 2),
            _rec("intr-old", "b", "interrupted", 1), _rec("fail-new", "b", "failed", 2),
            _rec("intr-kept", "c", "interrupted", 1, resume=3), _rec("fail-newer", "c", "failed", 2),
            _rec("fail", "d", "failed", 1), _rec("cancel-new", "d", "cancelled", 2),
            _rec("intr", "e", "interrupted", 1), _rec("cancel-newer", "e", "cancelled", 2)]
    chosen = {k: r.run_id for k, r in records.stand_ins(recs).items()}
    assert chosen == {"a": "intr-new", "b": "fail-new", "c": "intr-kept", "d": "fail", "e": "intr"}

def test_report_completeness_and_reproduction_choose_the_same_run():
    """Seed 0 finished under an older key and diverged under a newer one (a rerun after a code version
    bump); seed 1 failed, then finished on a retry under another key. Each reader takes the newer result
    of seed 0 (before: completeness kept the first one's status and the reproduction the newest finished
    run, so the report said diverged, completeness finished and the reproduction counted the seed in n)."""
    trials = [_rec("old-0", "k0-v1", "finished", 1), _rec("new-0", "k0-v2", "diverged", 2),
              _rec("fail-1", "k1-v1", "failed", 3, seed=1), _rec("retry-1", "k1-v2", "finished", 4, seed=1)]
    chosen = {r.run_id for r in report_rows._one_per_seed(trials)}
    assert chosen == {"new-0", "retry-1"}
    planned = [{"key": "k0-v3", "task": "multi30k", "label": "GloVe", "axes": {}, "point": {}, "seed": 0},
               {"key": "k1-v3", "task": "multi30k", "label": "GloVe", "axes": {}, "point": {}, "seed": 1}]
    assert completeness._statuses(planned, records.by_key(trials)) == ["diverged", "finished"]
    rep = ReproductionData.__new__(ReproductionData)
    rep.data = {"e": (trials, [])}
    group = Group("e", "multi30k", "GloVe", "GloVe", "s.yaml")
    assert {t.run_id for t in rep.seed_slots(group, "P")} == chosen
    assert [t.run_id for t in rep.main_trials(group, "P")] == ["retry-1"]



def test_table4_takes_the_newest_run_of_each_seed_by_the_same_rule():
    """Table 4's analogy runs have no status or start of their own (the start is MLflow's run info):
    `table4_runs.select` takes the newest run of each seed (of equal starts, the later read) through
    `stand_ins` with their start and one rank, not a copy of the rule."""
    from embinit.reproduction.table4_runs import select
    from embinit.tracking.run_records import AnalogyRun

    runs = [AnalogyRun((), {"seed": seed}, run_id=run_id, name=run_id)
            for run_id, seed in (("s0-new", 0), ("s1-tie-a", 1), ("s0-old", 0), ("s1-tie-b", 1), ("s2", 2))]
    started = {"s0-new": 9, "s0-old": 1, "s1-tie-a": 5, "s1-tie-b": 5, "s2": 0}
    chosen = select(runs, started, {})
    assert [r.run_id for r in chosen.runs] == ["s0-new", "s1-tie-b", "s2"]
    assert len(chosen.repeated) == 2 and not chosen.other_configs
    same = records.stand_ins(runs, lambda r: str(r.seed), start=lambda r: started[r.run_id], strength=lambda r: 0)
    assert sorted(r.run_id for r in same.values()) == [r.run_id for r in chosen.runs]
