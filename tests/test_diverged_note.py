"""A diverged trial's MLflow run says on its page what it is (`trial_results.diverged_note`): MLflow shows
it as a green "Finished" run like any result, holding `best/*` and `selected/val/*` of its epochs before
the NaN, while the report leaves it out of its row's mean."""

from __future__ import annotations

from embinit.tracking import mlflow_store, trial_run
from embinit.tracking.run_names import NOTE_TAG


def _run(uri, exp, key, status, extras=None, epochs=2):
    cfg = {"task": "synthetic_lm" if extras else "synthetic_translation", "init": "xavier", "seed": 0,
           **({"extras": extras} if extras else {})}
    run = trial_run.TrialRun.open(uri, exp, None, cfg, key, "Xavier", {"axes": {}, "point": {}})
    history = [{"epoch": e, "val/loss": 2.0 / e, "train/loss": 3.0 / e} for e in range(1, epochs + 1)]
    run.finish({"status": status, "config": cfg, "history": history, "best": {"val/loss": 1.0} if epochs else {},
                "best_epoch": epochs or None, "test": {} if status == "diverged" else {"test/bleu": 9.0},
                "diverged_step": 123 if status == "diverged" else None}, [])
    return mlflow_store.client(uri).get_run(run.run_id)


def test_a_diverged_run_s_description_says_it_diverged_and_what_its_metrics_are(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    exp = mlflow_store.ensure_experiment("dv", uri)
    run = _run(uri, exp, "k1", "diverged")
    assert run.info.status == "FINISHED"
    assert run.data.tags[NOTE_TAG] == (
        "Diverged: the training loss was NaN/inf at optimizer step 123. No test metrics; the report counts this "
        "trial as diverged and leaves it out of its row's mean; best/* and selected/val/* are from the 2 epochs "
        "before it.")
    assert "no epoch completed" in _run(uri, exp, "k2", "diverged", epochs=0).data.tags[NOTE_TAG]
    assert NOTE_TAG not in _run(uri, exp, "k3", "finished").data.tags
    # a language model validated on its test split keeps that note too
    note = _run(uri, exp, "k4", "diverged", extras={"eval_split": "test"}).data.tags[NOTE_TAG]
    assert note.startswith("Diverged: ") and note.endswith("no separate test split")
