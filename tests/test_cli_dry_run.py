"""`embinit run SPEC --dry-run`'s cost: the trials at a time on this machine, counted by its CPUs and, where
a trial asks for GPUs, by its GPUs; a GPU spec on a machine without one is said to be unable to start here
(`embinit run` there stops at once), not costed as if its trials ran on the CPUs."""

from __future__ import annotations

import pytest

from embinit.cli import dry_run
from embinit.cli.dry_run_store import Resume
from embinit.spec import load_spec


def _spec(resources: dict, **more):
    return load_spec({"name": "p", "tasks": [{"task": "synthetic_translation", "epochs": 1}], "inits": ["xavier"],
                      "seeds": 4, "resources": resources, **more})


@pytest.fixture
def machine(monkeypatch):
    def with_(cpus: int, gpus: int) -> None:
        monkeypatch.setattr(dry_run.os, "cpu_count", lambda: cpus)
        monkeypatch.setattr(dry_run, "gpus_here", lambda: gpus, raising=False)
    return with_


def test_trials_that_ask_for_gpus_are_counted_by_the_gpus(machine):
    machine(16, 1)   # the GPU machine of docs/benchmarks.md: one H200, 16 cores
    assert dry_run.parallelism(_spec({"cpus": 2, "gpus": 0.25})) == (4, "1 GPU / 0.25 per trial")
    assert dry_run.parallelism(_spec({"cpus": 1, "gpus": 0.08})) == (12, "1 GPU / 0.08 per trial")
    assert dry_run.parallelism(_spec({"cpus": 4, "gpus": 0.25})) == (4, "16 CPUs / 4 per trial")
    assert dry_run.parallelism(_spec({"cpus": 1})) == (16, "16 CPUs / 1 per trial")


def test_a_gpu_spec_on_a_machine_without_gpus_cannot_start_here(machine):
    machine(2, 0)
    spec = _spec({"cpus": 1, "gpus": 0.25}, execution={"fuse": "auto"})
    plan = spec.plan()
    text = "\n".join(dry_run.cost_lines(spec, plan, None) + dry_run.execution_lines(spec, plan))
    assert "4 trial-epochs; no trial can start here (0 GPUs / 0.25 per trial)" in text
    assert "at a time" not in text


def test_the_last_line_counts_one_trial_as_one_trial(tmp_path):
    spec = load_spec({"name": "one", "tasks": [{"task": "synthetic_lm", "epochs": 1}], "inits": ["xavier"],
                      "seeds": 1})
    text = dry_run.dry_run(spec, f"sqlite:///{tmp_path}/mlflow.db")
    assert text.splitlines()[-1].startswith("1 trial; MLflow experiment 'one' at ")


def test_an_epoch_under_a_second_is_not_costed_as_zero_seconds(monkeypatch):
    spec = _spec({"cpus": 1})
    shape = dry_run.shape_of(dry_run.TrialConfig.from_dict(spec.plan()[0].config))
    for seconds, shown in ((0.42, "0.42"), (4.25, "4.2"), (37.4, "37")):
        monkeypatch.setattr(dry_run, "past_epoch_s", lambda uri, read=None, s=seconds: {
            shape.model: [(shape.batching, s)]})
        row = next(line for line in dry_run.cost_lines(spec, spec.plan(), "sqlite:///x.db")
                   if "synthetic_translation" in line)
        assert row.split()[5] == shown, row


def test_a_resumed_trial_costs_only_the_epochs_after_its_checkpoint(machine, monkeypatch):
    """A trial the run resumes (an interrupted run's checkpoint after epoch e) trains epochs - e more; the
    total and the wall-clock estimate count those, not the whole trial again."""
    machine(2, 0)
    spec = load_spec({"name": "r", "tasks": [{"task": "synthetic_translation", "epochs": 5}], "inits": ["xavier"],
                      "seeds": 4, "resources": {"cpus": 1}})
    plan = spec.plan()
    shape = dry_run.shape_of(dry_run.TrialConfig.from_dict(plan[0].config))
    monkeypatch.setattr(dry_run, "past_epoch_s", lambda uri, read=None: {shape.model: [(shape.batching, 6.0)]})

    def text(resumed):
        return "\n".join(dry_run.cost_lines(spec, plan, "sqlite:///x.db", resumed=resumed))

    whole = text({})
    assert "total: 20 trial-epochs" in whole and "2.0 trial-minutes" in whole and "resume" not in whole
    resumed = {plan[0].key: Resume("interrupted after epoch 3", 3), plan[1].key: Resume("stale", None),
               plan[2].key: Resume("failed after epoch 5", 5)}
    cut = text(resumed)
    assert "total: 12 trial-epochs" in cut and "1.2 trial-minutes" in cut, cut   # 20 - 3 - 5; unknown: in full
    assert "2 trials resume from a checkpoint (marked above): the 8 epochs already trained are not counted" in cut
    one = text({plan[0].key: Resume("interrupted after epoch 1", 1)})   # the walkthrough's "1 epoch ... are"
    assert "1 trial resumes from a checkpoint (marked above): the 1 epoch already trained is not counted" in one, one


def test_a_translation_trial_s_line_names_its_source_table_s_init():
    """The label leaves the source side out where it is Xavier or the target's own: `glove` alone (GloVe on
    both tables) and `{tgt: glove, src: xavier}` were both `GloVe` on their lines."""
    def lines(init):
        spec = load_spec({"name": "src", "tasks": ["synthetic_translation", "synthetic_lm"], "seeds": 1,
                          "inits": [init], "axes": {"lr": [0.001]}})
        return [(line.split()[2], line.split()[3], line.split("  ")[-1]) for line in
                dry_run.trial_lines(spec, spec.plan())[1:]]
    assert lines({"tgt": "normal", "src": "xavier"}) == [
        ("synthetic_translation", "Normal", '{"src": "xavier", "lr": 0.001}'),
        ("synthetic_lm", "Normal", '{"lr": 0.001}')]   # no source table
    assert lines("normal") == [("synthetic_translation", "Normal", '{"src": "normal", "lr": 0.001}'),
                               ("synthetic_lm", "Normal", '{"lr": 0.001}')]


def test_a_tracking_server_that_does_not_answer_is_a_note_not_every_trial_to_train(tmp_path):
    """A dry run reads a tracking server's trials through it; one that cannot be reached is said, so the
    trials listed as still to train are not taken for the store's word."""
    from live_server import free_port
    spec = load_spec({"name": "one", "tasks": [{"task": "synthetic_lm", "epochs": 1}], "inits": ["xavier"],
                      "seeds": 1})
    uri = f"http://127.0.0.1:{free_port()}"
    text = dry_run.dry_run(spec, uri)
    assert (f"note: the MLflow server {uri} cannot be reached ([Errno 111] Connection refused); the trials it has "
            "finished are not counted here") in text
