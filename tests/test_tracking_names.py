"""What MLflow's UI shows of embinit's runs (issue 22, item 13): trial runs named by label and seed, the
`init` param the report's label (the spec as written in `init_spec`), the model size as params, no empty
`embinit.checkpoint_epoch` tag once nothing is kept, sweep runs named after the spec and numbered, the spec's
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


@pytest.mark.parametrize("task, over, left_out, kept", [
    # found in an acceptance run: an SST-2 classifier's Overview listed beam_size=1, length_penalty=0.6 and
    # cuda_graphs=False, options it never reads
    ("synthetic_classification", {}, ["beam_size", "length_penalty", "cuda_graphs", "tie_embeddings", "oov"],
     ["epochs", "dropout", "pos_encoding"]),
    # `oov` only where a table has rows for a rule: Xavier's has none (its key keeps the default), GloVe's may
    ("synthetic_classification", {"init": "glove", "pretrained": "/g.txt"}, ["beam_size"], ["oov", "init"]),
    ("synthetic_classification", {"init": "glove+match", "pretrained": "/g.txt"}, ["oov"], ["init"]),
    ("synthetic_lm", {}, ["beam_size", "length_penalty", "cuda_graphs"], ["tie_embeddings", "epochs"]),
    ("synthetic_translation", {}, ["length_penalty", "cuda_graphs", "tie_embeddings"], ["beam_size", "epochs"]),
    ("synthetic_translation", {"beam_size": 4, "length_penalty": 1.0}, ["cuda_graphs", "tie_embeddings"],
     ["beam_size", "length_penalty"]),
])
def test_a_trial_s_params_leave_out_options_its_task_never_reads(store, task, over, left_out, kept):
    """A trial's Overview lists the options it trained with: decoding options only where its task decodes
    (translation; `length_penalty` only with a beam, as its key), `tie_embeddings` only for a language
    model, `cuda_graphs` only when on, `oov` only where a table has rows for a rule. The config tag, which
    `train --from-run` reads, keeps every field."""
    import torch
    uri, exp = store
    cfg = TrialConfig(task=task, seed=0, **over)
    run = trial_run.TrialRun.open(uri, exp, None, cfg.to_dict(), f"k-idle-{task}-{len(over)}", "Xavier", {})
    run.log_train_start(cfg.resolved(), torch.nn.Linear(3, 2), "cpu")
    got = mlflow_store.client(uri).get_run(run.run_id)
    assert not set(left_out) & set(got.data.params), got.data.params
    assert set(kept) <= set(got.data.params), got.data.params
    assert records.config_of(got.data.tags) == cfg.to_dict()


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
    assert mlflow_store.client(uri).get_run(parent).info.run_name.startswith("my-study #")
    assert run_readers.finished_sweep(exp, uri, "0123456789abcdef") is None   # still running
    run_writers.end_parent_run(parent, uri, "FINISHED", None, {})
    assert run_readers.finished_sweep(exp, uri, "0123456789abcdef") == parent
    assert run_readers.finished_sweep(exp, uri, "another-spec") is None
    run_writers.describe_experiment(exp, uri, "GloVe vs Xavier on Multi30k")
    assert mlflow_store.client(uri).get_experiment(exp).tags[run_names.NOTE_TAG] == "GloVe vs Xavier on Multi30k"
    run_writers.describe_experiment(exp, uri, "")   # a spec without one keeps what is there
    assert mlflow_store.client(uri).get_experiment(exp).tags[run_names.NOTE_TAG] == "GloVe vs Xavier on Multi30k"


def test_each_sweep_of_a_spec_is_numbered_in_its_experiment(store):
    """Found in an acceptance run: a spec run four times (its grid extended) gave four sweep runs of one
    name in the run table. Each is now its spec's name and its number in the experiment, counted over
    every sweep run there (another spec's, a deleted one's: a number is never given twice); the spec's
    name stays readable from its tag, as an older run's from its name."""
    uri, _ = store
    c = mlflow_store.client(uri)
    exp = mlflow_store.ensure_experiment("numbered", uri)
    first = run_writers.start_parent_run(exp, uri, "aaaa0000", "name: sst2-grid\n", 2, run_name="sst2-grid")
    second = run_writers.start_parent_run(exp, uri, "bbbb0000", "name: sst2-grid\n", 4, run_name="sst2-grid")
    other = run_writers.start_parent_run(exp, uri, "cccc0000", "name: other\n", 1, run_name="other")
    c.delete_run(second)
    third = run_writers.start_parent_run(exp, uri, "dddd0000", "name: sst2-grid\n", 6, run_name="sst2-grid")
    names = {run: c.get_run(run).info.run_name for run in (first, second, other, third)}
    assert names == {first: "sst2-grid #1", second: "sst2-grid #2", other: "other #3", third: "sst2-grid #4"}
    old = c.create_run(exp, run_name="legacy", tags={records.KIND_TAG: "sweep", records.SPEC_HASH_TAG: "eeee"})
    spec_names = {r.run_id: r.spec_name for r in run_readers.sweep_records(exp, uri)}
    assert spec_names == {first: "sst2-grid", other: "other", third: "sst2-grid", old.info.run_id: "legacy"}
    assert run_names.sweep_run_name("sst2-grid", 12) == "sst2-grid #12"


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


def _vectors(tmp) -> str:
    from embinit.tasks.synthetic import LEXICON
    path = tmp / "glove.txt"
    path.write_text("".join(f"{w} " + " ".join(f"{(i + j) % 7 / 10:.1f}" for j in range(8)) + "\n"
                            for i, w in enumerate(sorted(set(LEXICON.values())))))
    return str(path)


SIBLINGS = {   # the acceptance review's cases, at toy scale: a spec, and the names of two of its runs
    "grid": ({"tasks": [{"task": "synthetic_classification"}], "seeds": [0, 1],
              "search": {"method": "grid", "space": {"lr": [1.0e-4, 1.0e-3]}}},
             ["Xavier-s0 lr=0.0001", "Xavier-s0 lr=0.001"]),
    "table3": ({"tasks": [{"task": "synthetic_translation"}], "seeds": [0, 1],
                "axes": {"train_embeddings": [False, True], "pos_encoding": [False, True]}},
               ["Xavier-s0 train_embeddings=False,pos_encoding=False",
                "Xavier-s1 train_embeddings=True,pos_encoding=False"]),
    "oov": ({"tasks": [{"task": "synthetic_translation"}], "seeds": [0, 1],
             "inits": [{"tgt": "glove+standardize", "src": "xavier"}], "axes": {"oov": ["xavier", "mean"]}},
            ["GloVe_Xavier-s0 oov=xavier", "GloVe_Xavier-s0 oov=mean"]),
    "blog": ({"tasks": [{"task": "synthetic_lm"}], "seeds": [1], "axes": {"emb_seed": [1, 2]}},
             ["Xavier-s1 emb_seed=1", "Xavier-s1 emb_seed=2"]),
    # two tasks: each run named `Xavier-s0` (the cell tag had the task, the name not)
    "tasks": ({"tasks": [{"task": "synthetic_classification"}, {"task": "synthetic_lm"}], "seeds": [0, 1]},
              ["Xavier-s0 (synthetic_classification)", "Xavier-s0 (synthetic_lm)"]),
}


@pytest.mark.parametrize("study", sorted(SIBLINGS))
def test_sibling_trials_have_distinct_names_and_a_cell_tag_that_pools_only_seeds(store, study, tmp_path):
    """Found by an acceptance review: an MNLI grid had two runs named `Xavier-s0` (lr 1e-4 and 1e-3), a
    Table 3 ablation four (its train/PE cells), an OOV study four `GloVe_Xavier-s0`, the blog two
    `Xavier-s1` (emb_seed 1 and 2); "Group by embinit.init" pooled the grid points and cells. A run's name
    now says its axes' and search point's values, and `embinit.cell` groups a cell's seeds, nothing more."""
    from embinit.spec import load_spec
    from embinit.spec.planning import plan
    from embinit.sweep.work import work_item
    uri, _ = store
    data, names = SIBLINGS[study]
    spec = load_spec({"name": f"siblings-{study}", "inits": ["xavier"], "pretrained": _vectors(tmp_path), **data})
    exp = mlflow_store.ensure_experiment(spec.name, uri)
    for p in plan(spec):
        item = work_item(spec, p)
        trial_run.TrialRun.open(uri, exp, None, item.config, item.key, item.label, item.group(),
                                name_task=item.name_task)
    runs = mlflow_store.search_runs(exp, uri)
    got = sorted(r.info.run_name for r in runs)
    assert len(set(got)) == len(got) == len(plan(spec)), got
    assert set(names) <= set(got), got
    cells: dict[str, set] = {}
    for r in runs:   # seeds pooled, grid points and cells apart
        cells.setdefault(r.data.tags[records.CELL_TAG], set()).add(r.data.tags[records.SEED_TAG])
    assert len(cells) == len(plan(spec)) // len(spec.seeds), cells
    assert all(seeds == {str(s) for s in spec.seeds} for seeds in cells.values()), cells
    task = spec.tasks[0].task
    cell = names[0].replace('-s' + str(spec.seeds[0]), '')
    assert (cell if len(spec.tasks) > 1 else f"{cell} ({task})") in cells, cells   # the name but its seed


def test_a_name_keeps_an_optuna_points_value_short_and_a_plain_trials_name_as_before():
    assert run_names.trial_run_name("Xavier", 0, {}, {"lr": 0.000123456789, "dropout": 0.1}) == \
        "Xavier-s0 lr=0.000123457,dropout=0.1"
    assert run_names.trial_run_name("GloVe_Xavier", 3, {}, {}) == "GloVe_Xavier-s3"
    assert run_names.trial_run_name("GloVe", 0, {}, {"lr": 0.001}, "mnli") == "GloVe-s0 lr=0.001 (mnli)"
    assert run_names.trial_cell("mnli", "GloVe", {"sigma": "4x"}, None) == "GloVe sigma=4x (mnli)"


def _wikitext_without_train(folder):
    """A WikiText-2 copy without its train file, as the offline blog spec reads (valid and test only): the
    spec's `data_dir` holds a folder per task."""
    (folder / "wikitext2").mkdir(parents=True)
    words = "the cat sat on a mat and the dog ran to the red door".split()
    for split, shift in (("valid", 0), ("test", 3)):
        lines = [" ".join(words[(i + j + shift) % len(words)] for j in range(12)) for i in range(40)]
        (folder / "wikitext2" / f"wiki.{split}.tokens").write_text("\n".join(lines) + "\n")
    return str(folder)


def test_a_language_model_validated_on_the_test_split_says_so_in_its_run_and_the_report(store, tmp_path):
    """Found by an acceptance review: a trial with `extras: {eval_split: test}` (the offline blog spec)
    logged the test split as `val/ppl`, and `embinit report` showed test/ppl with n=0, "logged no value",
    never saying that val/* is the test split. The names stay (the trainer selects on `val/ppl`; readers
    of existing runs read it); the run's description and the report say which split it is."""
    from ray import tune

    from embinit.spec import load_spec
    from embinit.sweep.trainable import train_unit
    from embinit.sweep.work import SweepContext, units_to_run
    from embinit.report.table import build_report
    uri, _ = store
    spec = load_spec({"name": "lm-on-test", "tasks": [{
        "task": "wikitext2", "tokenizer": "whitespace", "epochs": 1, "batch_size": 4, "d_model": 16, "heads": 2,
        "layers": 1, "ff_dim": 16, "max_len": 16, "extras": {"train_split": "valid", "eval_split": "test"}}],
        "inits": ["xavier"], "seeds": [0], "data_dir": _wikitext_without_train(tmp_path / "wiki"),
        "cache_dir": str(tmp_path / "cache"), "resources": {"cpus": 1},
        "mlflow": {"tracking_uri": uri, "log_checkpoint": False, "log_plots": False}})
    exp = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), 1, run_name=spec.name)
    units, _ = units_to_run(spec, set())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tune, "report", lambda metrics, checkpoint=None: None)
        mp.setattr(tune, "get_checkpoint", lambda: None)
        train_unit({"unit": 0}, SweepContext(uri, exp, parent, log_checkpoint=False, log_plots=False,
                                             cache_dir=spec.cache_dir), units)
    (run,) = [r for r in mlflow_store.search_runs(exp, uri) if records.KEY_TAG in r.data.tags]
    said = "val/* is the test split (eval_split: test); no separate test split"
    assert run.data.tags[records.STATUS_TAG] == "finished", run.data.tags.get(records.ERROR_TAG)
    assert "best/val/ppl" in run.data.metrics and "test/ppl" not in run.data.metrics   # as before
    assert run.data.tags[run_names.NOTE_TAG] == said                   # the run's description in the UI
    report = build_report(spec.experiment_name(), tracking_uri=uri)
    (row,) = report.rows
    assert (row["metric"], row["n"], row["no_value"], row["eval_split_note"]) == ("test/ppl", 0, 1, said)
    md = report.to_markdown()
    assert f"- wikitext2 Xavier (test/ppl): 1 finished seed(s) logged no value of it: {said}" in md
    assert f"- wikitext2 Xavier: {said}" in md


def test_a_trial_s_plots_are_titled_by_its_run_name(tmp_path, monkeypatch):
    """`val_curve.png` (and the init histogram) were titled by the label alone, `Xavier`, for each trial of
    an axis: the plots of `dropout=0.1` and `dropout=0.3` read alike. They take the run's name now."""
    from ray import tune

    from embinit import plots
    from embinit.spec import load_spec
    from embinit.sweep.trainable import train_unit
    from embinit.sweep.work import SweepContext, units_to_run
    monkeypatch.setattr(tune, "report", lambda metrics, checkpoint=None: None)
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    titles = []
    curve, histogram = plots.validation_curve, plots.init_histogram
    monkeypatch.setattr(plots, "validation_curve", lambda history, path, title, loss:
                        titles.append(title) or curve(history, path, title, loss))
    monkeypatch.setattr(plots, "init_histogram", lambda values, shape, path, title:
                        titles.append(title) or histogram(values, shape, path, title))
    uri = f"sqlite:///{tmp_path}/m.db"
    spec = load_spec({"name": "titles", "tasks": [{"task": "synthetic_classification", "epochs": 1,
                                                   "max_train_examples": 32, "ff_dim": 16, "heads": 2}],
                      "inits": ["xavier"], "seeds": [0], "axes": {"dropout": [0.3]}, "cache_dir": str(tmp_path),
                      "mlflow": {"tracking_uri": uri, "log_checkpoint": False}})
    exp = mlflow_store.ensure_experiment("titles", uri)
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), 1, run_name=spec.name)
    units, _ = units_to_run(spec, set())
    train_unit({"unit": 0}, SweepContext(uri, exp, parent, log_checkpoint=False, cache_dir=str(tmp_path)), units)
    (run,) = [r for r in mlflow_store.search_runs(exp, uri) if records.KEY_TAG in r.data.tags]
    assert run.info.run_name == "Xavier-s0 dropout=0.3"
    assert titles == ["Xavier-s0 dropout=0.3", "Xavier-s0 dropout=0.3"]
