"""What MLflow's UI shows of embinit's runs (issue 22, item 13): trial runs named by label and seed, the
`init` param the report's label (the spec as written in `init_spec`), the model size as params, no empty
`embinit.checkpoint_epoch` tag once nothing is kept, sweep runs named after the spec, the spec's
description as the experiment's. Real MLflow on a temporary SQLite store (no Ray)."""

from __future__ import annotations

import pytest

from embinit.tracking import mlflow_store, records, run_names, run_readers, run_writers, trial_run
from embinit.config import TrialConfig

pytestmark = pytest.mark.slow  # creating an MLflow SQLite store takes a few seconds


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('names')}/mlflow.db"
    return uri, mlflow_store.ensure_experiment("names", uri)


def config(seed: int) -> dict:
    return {"task": "synthetic_translation", "init": "glove+standardize", "seed": seed}


def result() -> dict:
    return {"status": "finished", "history": [{"epoch": 1, "val/loss": 1.0}], "best": {"val/loss": 1.0},
            "test": {}, "best_epoch": 1, "label": "GloVe_Xavier"}


def test_a_trial_run_is_named_by_label_and_seed_and_its_init_param_is_the_label(store):
    import torch
    uri, exp = store
    run = trial_run.TrialRun.open(uri, exp, None, config(3), "k-name", "GloVe_Xavier", {})
    run.log_train_start(TrialConfig.from_dict(config(3)), torch.nn.Linear(3, 2), "cpu")   # training starts
    got = mlflow_store.client(uri).get_run(run.run_id)
    assert got.info.run_name == "GloVe_Xavier-s3"
    assert got.data.params["init"] == "GloVe_Xavier"                  # what the report and the tags say
    assert got.data.params["init_spec"] == "glove+standardize"        # the spec as written


def test_the_config_params_go_with_the_first_write_whichever_it_is(store):
    """One write fewer per trial: the params wait for the run's first batch (the model size, an epoch,
    the result or the failure); a reopened run whose first attempt died before any write gets them."""
    uri, exp = store
    c = mlflow_store.client(uri)
    run = trial_run.TrialRun.open(uri, exp, None, config(7), "k-first", "GloVe_Xavier", {})
    assert c.get_run(run.run_id).data.params == {}
    assert c.get_run(run.run_id).data.tags[records.CONFIG_TAG]      # the config is there from the start
    run.log_epoch(1, {"val/loss": 1.0})
    assert c.get_run(run.run_id).data.params["init"] == "GloVe_Xavier"
    failed = trial_run.TrialRun.open(uri, exp, None, config(8), "k-fail", "GloVe_Xavier", {})
    failed.fail("EmbinitError: no such file")
    assert c.get_run(failed.run_id).data.params["init_spec"] == "glove+standardize"
    died = trial_run.TrialRun.open(uri, exp, "parent", config(9), "k-died", "GloVe_Xavier", {})
    again = trial_run.TrialRun.open(uri, exp, "parent", config(9), "k-died", "GloVe_Xavier", {})
    assert again.run_id == died.run_id and again.reopened
    again.finish(result(), [])
    got = c.get_run(died.run_id)
    assert got.data.params["init"] == "GloVe_Xavier" and got.info.status == "FINISHED"
    assert "result.json" in {f.path for f in c.list_artifacts(died.run_id)}   # written to its location


def test_the_model_size_is_a_param(store):
    import torch
    uri, exp = store
    run = trial_run.TrialRun.open(uri, exp, None, config(4), "k-size", "GloVe_Xavier", {})
    model = torch.nn.Linear(3, 2)   # 6 weights + 2 biases
    model.bias.requires_grad_(False)
    run.log_train_start(TrialConfig.from_dict(config(4)), model, "cpu")
    run.log_train_start(TrialConfig.from_dict(config(4)), model, "cpu")   # a resumed attempt: no error
    params = mlflow_store.client(uri).get_run(run.run_id).data.params
    assert (params["model_parameters"], params["trainable_parameters"]) == ("8", "6")


def test_no_empty_checkpoint_tag_once_nothing_is_kept(store):
    uri, exp = store
    done = trial_run.TrialRun.open(uri, exp, None, config(5), "k-ckpt", "GloVe_Xavier", {})
    done.log_epoch(1, {"val/loss": 1.0}, checkpoint=True)
    assert mlflow_store.client(uri).get_run(done.run_id).data.tags[records.CHECKPOINT_TAG] == "1"
    done.finish(result(), [])
    assert records.CHECKPOINT_TAG not in mlflow_store.client(uri).get_run(done.run_id).data.tags
    bad = trial_run.TrialRun.open(uri, exp, None, config(6), "k-bad", "GloVe_Xavier", {})
    bad.log_epoch(1, {"val/loss": 1.0}, checkpoint=True)
    bad.fail("EmbinitError: bad file", checkpoint=False)
    assert records.CHECKPOINT_TAG not in mlflow_store.client(uri).get_run(bad.run_id).data.tags
    kept = trial_run.TrialRun.open(uri, exp, None, config(7), "k-kept", "GloVe_Xavier", {})
    kept.log_epoch(1, {"val/loss": 1.0}, checkpoint=True)
    kept.fail("worker died")        # its checkpoint is kept: resumable, the tag stays
    assert mlflow_store.client(uri).get_run(kept.run_id).data.tags[records.CHECKPOINT_TAG] == "1"


def test_sweep_runs_are_named_after_the_spec_and_its_description_is_the_experiments(store):
    uri, exp = store
    parent = run_writers.start_parent_run(exp, uri, "0123456789abcdef", "name: my-study\n", 2, run_name="my-study")
    assert mlflow_store.client(uri).get_run(parent).info.run_name == "my-study"
    assert run_readers.finished_sweep(exp, uri, "0123456789abcdef") is None   # still running
    run_writers.end_parent_run(parent, uri, "FINISHED", None, {})
    assert run_readers.finished_sweep(exp, uri, "0123456789abcdef") == parent
    assert run_readers.finished_sweep(exp, uri, "another-spec") is None
    run_writers.describe_experiment(exp, uri, "GloVe vs Xavier on Multi30k")
    assert mlflow_store.client(uri).get_experiment(exp).tags[run_names.NOTE_TAG] == "GloVe vs Xavier on Multi30k"
    run_writers.describe_experiment(exp, uri, "")   # a spec without one keeps what is there
    assert mlflow_store.client(uri).get_experiment(exp).tags[run_names.NOTE_TAG] == "GloVe vs Xavier on Multi30k"


def test_an_attempt_that_starts_over_gets_a_run_of_its_own(store):
    """A trial whose dead attempt logged epochs but left no checkpoint starts over from epoch 1. Reopening
    the dead run spliced two histories into it: the new attempt's epochs up to the dead one's last were
    dropped as already held, its later ones kept. Now the new attempt has a run of its own that names the
    dead one, which is closed failed naming its successor; a resumed attempt (a checkpoint) still reopens."""
    uri, exp = store
    c = mlflow_store.client(uri)
    dead = trial_run.TrialRun.open(uri, exp, "sweep", config(11), "k-over", "GloVe_Xavier", {})
    for epoch, loss in ((1, 3.0), (2, 2.0)):
        dead.log_epoch(epoch, {"val/loss": loss}, checkpoint=True)
    over = trial_run.TrialRun.open(uri, exp, "sweep", config(11), "k-over", "GloVe_Xavier", {},
                                   run_id=dead.run_id, resumed_epoch=None)
    assert over.run_id != dead.run_id and not over.reopened
    for epoch, loss in ((1, 2.9), (2, 1.9), (3, 1.5)):
        over.log_epoch(epoch, {"val/loss": loss})
    steps = [(m.step, m.value) for m in c.get_metric_history(over.run_id, "val/loss")]
    assert sorted(steps) == [(1, 2.9), (2, 1.9), (3, 1.5)]               # all of its own points, none of the dead run's
    old, new = c.get_run(dead.run_id), c.get_run(over.run_id)
    assert old.info.status == "FAILED" and old.data.tags[records.STATUS_TAG] == "failed"
    assert old.data.tags[records.SUPERSEDED_TAG] == over.run_id and over.run_id in old.data.tags[records.ERROR_TAG]
    assert records.CHECKPOINT_TAG not in old.data.tags                    # not resumable: its folder is gone
    assert new.data.tags[records.RESTARTED_TAG] == dead.run_id
    # the sweep's search for its unfinished run of the key finds the new one, which a checkpoint resumes
    again = trial_run.TrialRun.open(uri, exp, "sweep", config(11), "k-over", "GloVe_Xavier", {}, resumed_epoch=3)
    assert again.run_id == over.run_id and again.reopened
    assert run_readers.newest_finished(run_readers.key_records(exp, uri, "k-over")) is None
