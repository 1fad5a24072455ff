"""End to end: a spec on local Ray with MLflow in a temporary SQLite store, on the synthetic translation
task (tiny: 1-layer model, 300 training pairs, 2 epochs).

- runs appear with their metrics, the report has the right rows, a second submission trains nothing;
- a trial whose worker is killed mid-run (os._exit in a callback on the first attempt) restarts from
  its last epoch checkpoint, logs into the same MLflow run, and every epoch's history is there;
- a trial that raises is recorded as failed with its error, and the sweep goes on.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import ray.cloudpickle
from sacrebleu.metrics import BLEU

from embinit.tracking import mlflow_store, provenance, records
from embinit.spec import load_spec
from embinit.sweep import run_sweep, tune_run
from helpers.sweep import before_tune_state_goes, sweep_spec_data

pytestmark = pytest.mark.slow

# The callbacks below are shipped to Ray workers by value (this test module is not importable there);
# Ray pickles with its vendored cloudpickle.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

TINY = {"task": "synthetic_translation", "epochs": 2, "max_train_examples": 300, "d_model": 16,
        "ff_dim": 32, "heads": 2}


def spec(name: str, tmp: Path, **over) -> object:
    data = sweep_spec_data(name, tmp, TINY, inits=["xavier", "normal", "xavier_normal"], seeds=2, retries=1,
                           mlflow={"tracking_uri": f"sqlite:///{tmp}/mlflow.db"})
    data.update(over)
    return load_spec(data)


def child_runs(uri: str, name: str) -> list:
    exp = mlflow_store.experiment_id(name, uri)
    return [r for r in mlflow_store.search_runs(exp, uri) if records.KEY_TAG in r.data.tags]


def test_sweep_records_runs_reports_and_resumes(ray_local, tmp_path):
    s = spec("e2e", tmp_path)
    uri = mlflow_store.resolve_uri(s.mlflow.tracking_uri)
    result = run_sweep(s, progress=False)
    assert (result.planned, result.reused, result.n_finished, result.n_failed) == (6, 0, 6, 0)
    runs = child_runs(uri, "e2e")
    assert len(runs) == 6 and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags[records.KEY_TAG] for r in runs} == {p.key for p in s.plan()}
    for run in runs:
        steps = [m.step for m in mlflow_store.client(uri).get_metric_history(run.info.run_id, "val/loss")]
        assert sorted(steps) == [1, 2]
        assert {"train/loss", "val/bleu", "tokens_per_s", "test/bleu", "best/val/loss", "best_epoch",
                "init/emb/std", "init/emb/absorption"} <= set(run.data.metrics)
        assert run.data.tags[records.PARENT_TAG] == result.parent_run_id
        # what the worker ran: its code's commit (None outside a git checkout), versions, data source
        assert run.data.tags.get(records.GIT_COMMIT_TAG) == provenance.git_commit()
        assert json.loads(run.data.tags[records.VERSIONS_TAG])["embinit"]
        assert run.data.tags[records.DATA_SOURCE_TAG] == "generated"
        assert (run.data.params["d_model"], run.data.params["precision"]) == ("16", "fp32")
        arts = {a.path for a in mlflow_store.client(uri).list_artifacts(run.info.run_id)}
        assert {"checkpoint", "plots", "outputs", "result.json", "emb_stats.json"} <= arts
        # the test translations test/bleu was computed from, scored again here by sacrebleu
        outs = Path(mlflow_store.client(uri).download_artifacts(run.info.run_id, "outputs",
                                                                str(tmp_path / run.info.run_id)))
        hyps, refs = ((outs / f).read_text().splitlines() for f in ("test_hypotheses.txt", "test_references.txt"))
        lowercase = "case:lc" in run.data.tags[records.BLEU_SIGNATURE_TAG]
        assert len(hyps) == len(refs) > 0
        assert BLEU(lowercase=lowercase, force=True).corpus_score(hyps, [refs]).score == pytest.approx(
            run.data.metrics["test/bleu"], abs=1e-9)
    parent = mlflow_store.client(uri).get_run(result.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.metrics["sweep/finished"] == 6
    logged = {a.path for d in ("", "report", "figures") for a in mlflow_store.client(uri).list_artifacts(
        result.parent_run_id, d or None)}
    assert {"report.md", "spec.yaml", "report/report.csv", "report/report.json", "report/report.tex",
            "figures/synthetic_translation.png"} <= logged
    rows = {r["init"]: r for r in result.report.rows}
    assert set(rows) == {"Xavier", "Normal", "XavierNormal"}
    assert all(r["n"] == 2 and r["metric"] == "test/bleu" and r["failed"] == 0 for r in rows.values())
    # the report artifact compares each init with Xavier, paired on the two seeds (issue 22)
    c = mlflow_store.client(uri)
    logged_json = json.loads(Path(c.download_artifacts(result.parent_run_id, "report/report.json", str(tmp_path)))
                             .read_text())
    assert logged_json["baseline"] == "Xavier" and logged_json["completeness"]["unfinished"] == 0
    vs = {r["init"]: r["vs_baseline"] for r in logged_json["rows"]}
    assert vs["Xavier"] is None and {(v["test"], v["pairs"]) for k, v in vs.items() if k != "Xavier"} == {
        ("paired t", 2)}
    assert vs["Normal"]["verdict"] in ("better", "worse", "inconclusive")
    assert "Difference from Xavier" in Path(c.download_artifacts(result.parent_run_id, "report.md",
                                                                 str(tmp_path))).read_text()

    again = run_sweep(s, progress=False)
    assert (again.reused, again.n_finished) == (6, 6)
    assert len(child_runs(uri, "e2e")) == 6                      # nothing trained a second time
    assert [r["mean"] for r in again.report.rows] == [r["mean"] for r in result.report.rows]


class KillOnce:
    """On the first attempt, kill the worker process right after epoch 1 was checkpointed."""

    def __init__(self, marker: str):
        self.marker = Path(marker)

    def on_train_start(self, ctx):
        with open(self.marker.with_suffix(".starts"), "a") as f:
            f.write(f"{ctx.step}\n")

    def on_epoch_end(self, ctx, epoch, metrics):
        if epoch == 1 and not self.marker.exists():
            self.marker.write_text("killed")
            os._exit(1)


@pytest.mark.parametrize("one_machine", [True, False], ids=["one-machine", "may-span-machines"])
def test_killed_worker_resumes_from_its_checkpoint(ray_local, tmp_path, monkeypatch, one_machine):
    """On the local Ray (one machine) the reports carry no checkpoint: Tune restarts the killed attempt
    without one and it resumes from its folder. On a Ray that may span machines (stood in for here)
    Tune keeps its copy of the folder, which a retry on another node would restore."""
    assert tune_run.one_machine()                           # the loopback Ray of `ray_local`
    if not one_machine:
        monkeypatch.setattr(tune_run, "one_machine", lambda: False)
    s = spec(f"kill{int(one_machine)}", tmp_path, inits=["xavier"], seeds=1, tasks=[{**TINY, "epochs": 3}],
             retries=2)
    marker = str(tmp_path / "marker")
    tune_copies = before_tune_state_goes(monkeypatch, lambda: list((Path(s.cache_dir) / "ray_results").rglob(
        "checkpoint_*")))
    result = run_sweep(s, progress=False, extra_callbacks=lambda cfg: [KillOnce(marker)])
    assert Path(marker).read_text() == "killed"
    starts = [int(x) for x in Path(marker).with_suffix(".starts").read_text().split()]
    assert len(starts) == 2 and starts[0] == 0 and starts[1] > 0    # the retry resumed, not restarted
    assert (result.n_finished, result.n_failed) == (1, 0)
    (run,) = child_runs(mlflow_store.resolve_uri(s.mlflow.tracking_uri), s.name)   # the same run, reused
    assert bool(tune_copies[0]) == (not one_machine)     # what Tune kept while the sweep ran
    hist = mlflow_store.client(result.tracking_uri).get_metric_history(run.info.run_id, "val/loss")
    assert sorted({m.step for m in hist}) == [1, 2, 3]
    assert run.info.status == "FINISHED" and run.data.metrics["best_epoch"] in (1, 2, 3)
    assert run.data.tags.get(records.GIT_COMMITS_TAG) == provenance.git_commit()   # one code, listed once


class Raise:
    def __init__(self, init: str):
        self.init = init

    def on_train_start(self, ctx):
        if ctx.cfg.init == self.init:
            raise RuntimeError("injected failure")


def test_a_failing_trial_is_recorded_and_the_sweep_continues(ray_local, tmp_path):
    from embinit.tasks.synthetic import LEXICON
    bad = tmp_path / "bad.txt"
    # a vector file a trial cannot use, a user error at setup: its first line gives D (16, the model's, so
    # the plan's check of D passes), and a word the vocabulary needs has a value that is no number (the
    # spec's check reads every line's shape, not the values: only a trial knows the rows it needs)
    needed = sorted(set(LEXICON.values()))[0]
    bad.write_text("the " + " ".join(["0.1"] * 16) + f"\n{needed} " + " ".join(["abc"] * 16) + "\n")
    huge = tmp_path / "huge.txt"                 # finite but absurdly scaled: the loss overflows
    huge.write_text("".join(f"{w} " + " ".join(["1e30"] * 16) + "\n" for w in set(LEXICON.values())))
    s = spec("fail", tmp_path, seeds=1, pretrained={"glove": str(bad)}, retries=0, inits=[
        "xavier", "normal", {"tgt": "glove", "src": "xavier"},
        {"tgt": {"source": "glove", "name": "Huge"}, "src": "xavier", "pretrained": str(huge)}])
    result = run_sweep(s, progress=False, extra_callbacks=lambda cfg: [Raise("normal")])
    statuses = {t["label"]: t["status"] for t in result.trials}
    assert statuses == {"Xavier": "finished", "Normal": "failed", "GloVe": "failed", "Huge": "diverged"}
    rows = {r["init"]: r for r in result.report.rows}
    assert (rows["Huge"]["diverged"], rows["Huge"]["n"]) == (1, 0)
    (huge_run,) = [t for t in result.trials if t["label"] == "Huge"]
    tags = mlflow_store.client(result.tracking_uri).get_run(huge_run["run_id"]).data.tags
    assert tags[records.STATUS_TAG] == "diverged"
    errors = {t["label"]: t["error"] for t in result.trials}
    assert "injected failure" in errors["Normal"]
    assert errors["GloVe"].startswith("EmbinitError: ")   # a user error: one line, no traceback
    assert len(result.report.failed) == 2
    assert "injected failure" in result.report.to_markdown()


def test_tune_that_cannot_read_its_own_state_back_leaves_the_trials_outcomes_said(ray_local, tmp_path, monkeypatch):
    """A full disk under Tune's storage left an errored trial's `error.pkl` empty: `tuner.fit()` ran every
    trial, then raised `EOFError: Ran out of input` building its ResultGrid, and the sweep failed with that
    message (the command with its traceback), its trials' runs closed "the sweep failed: EOFError: Ran out
    of input" and each trial's own error hidden. embinit reads no Tune result: the sweep ends as it would."""
    from ray.tune.experiment.trial import Trial

    def empty_error_file(self):
        raise EOFError("Ran out of input")
    monkeypatch.setattr(Trial, "get_pickled_error", empty_error_file)
    s = spec("readback", tmp_path, seeds=1, retries=0, inits=["xavier", "normal"])
    result = run_sweep(s, progress=False, extra_callbacks=lambda cfg: [Raise("normal")])
    assert {t["label"]: t["status"] for t in result.trials} == {"Xavier": "finished", "Normal": "failed"}
    (failed,) = [t for t in result.trials if t["status"] == "failed"]
    assert "injected failure" in failed["error"] and "EOFError" not in failed["error"]
    sweep = mlflow_store.client(result.tracking_uri).get_run(result.parent_run_id)
    assert sweep.info.status == "FINISHED" and "embinit.error" not in sweep.data.tags
