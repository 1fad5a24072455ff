"""`embinit train --from-run RUN_ID`: one trial re-run from its MLflow record (its `embinit.config` tag),
flags overriding the record, its key and test/* and best/* metrics compared with the record's. Real
MLflow on a temporary SQLite store; the recorded trial is really trained, as a sweep's worker does
(`TrialRun.open`, `run_trial`, `TrialRun.finish`), without Ray."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from embinit.tracking import mlflow_store, run_writers, trial_run
from embinit import rerun
from embinit.cli import main
from embinit.config import CODE_VERSION, TrialConfig
from embinit.task_registry import unregister
from embinit.tracking.records import TrialRecord

pytestmark = pytest.mark.slow  # an MLflow store and real (tiny) training


def _record(uri: str, exp: str, cfg: TrialConfig, parent: str | None = None, train_cache=None) -> str:
    """A trial run as a sweep's worker writes it: opened with the config tag, then (with `train_cache`)
    trained and finished with its result."""
    run = trial_run.TrialRun.open(uri, exp, parent, cfg.to_dict(), cfg.key(), "Xavier", {"axes": {}, "point": {}})
    if train_cache is not None:
        from embinit.train import run_trial
        run.finish(run_trial(cfg, cache_dir=train_cache).to_dict(), [])
    return run.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerun")
    uri = f"sqlite:///{root}/mlflow.db"
    exp = mlflow_store.ensure_experiment("rerun", uri)
    parent = run_writers.start_parent_run(exp, uri, "hash", "name: rerun\n", 1)
    # fp32, one thread, on the CPU: the same numbers on every run of this machine
    cfg = TrialConfig(task="synthetic_translation", seed=1, epochs=2, max_train_examples=300, threads=1,
                      precision="fp32", device="cpu", extras={"noise": 0.2})
    trained = _record(uri, exp, cfg, parent, train_cache=str(root / "cache"))
    return {"uri": uri, "exp": exp, "parent": parent, "trained": trained, "cfg": cfg, "root": root}


def _metrics(uri: str, run_id: str) -> dict[str, float]:
    return mlflow_store.client(uri).get_run(run_id).data.metrics


def test_a_rerun_reproduces_the_recorded_metrics_exactly(store, tmp_path, capsys):
    code = main(["train", "--from-run", store["trained"], "--tracking-uri", store["uri"], "--quiet",
                 "--cache-dir", str(tmp_path / "own-cache")])   # not the recording's cache: computed afresh
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"same key as the record: {store['cfg'].key()}" in out
    recorded = _metrics(store["uri"], store["trained"])
    compared = sorted(k for k in recorded if k.startswith(("test/", "best/")))
    assert {"test/bleu", "test/loss", "best/val/loss"} <= set(compared)
    for name in compared:   # a row per metric: recorded, re-run, difference 0
        row = next(line.split() for line in out.splitlines() if line.split()[:1] == [name])
        assert row == [name, repr(recorded[name]), repr(recorded[name]), "0"]
    assert f"reproduced: all {len(compared)} best/* and test/* metrics equal the record's" in out
    assert "status: finished" in out   # the usual summary too


def test_a_classifier_run_without_decoding_params_reruns_to_its_key_and_metrics(store, tmp_path, capsys):
    """A classifier's run no longer logs the decoding options and `cuda_graphs` as params (they mean
    nothing to it); `train --from-run` reads the config tag, which keeps them, so the rerun has the
    record's key and metrics."""
    import torch
    cfg = TrialConfig(task="synthetic_classification", seed=2, epochs=2, max_train_examples=200, threads=1,
                      precision="fp32", device="cpu")
    run = trial_run.TrialRun.open(store["uri"], store["exp"], store["parent"], cfg.to_dict(), cfg.key(), "Xavier",
                                  {"axes": {}, "point": {}})
    run.log_train_start(cfg.resolved(), torch.nn.Linear(2, 2), "cpu")   # what a sweep's worker logs first
    from embinit.train import run_trial
    run.finish(run_trial(cfg, cache_dir=str(tmp_path / "rec")).to_dict(), [])
    params = mlflow_store.client(store["uri"]).get_run(run.run_id).data.params
    assert not {"beam_size", "length_penalty", "cuda_graphs", "tie_embeddings"} & set(params), params
    code = main(["train", "--from-run", run.run_id, "--tracking-uri", store["uri"], "--quiet",
                 "--cache-dir", str(tmp_path / "own-cache")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"same key as the record: {cfg.key()}" in out, out
    assert "reproduced: all" in out and "metrics equal the record's" in out, out


def test_an_override_changes_the_key_and_names_the_field(store, tmp_path, capsys):
    code = main(["train", "--from-run", store["trained"], "--tracking-uri", store["uri"], "--epochs", "1",
                 "--quiet", "--json", "--cache-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)   # stdout: the result as `embinit train --json` prints it
    assert len(result["history"]) == 1 and result["config"]["extras"] == {"noise": 0.2}
    assert result["key"] != store["cfg"].key()
    assert "different key from the record" in captured.err
    assert "fields that differ from the record: epochs (recorded 2, re-run 1)" in captured.err
    assert "test/bleu" in captured.err and "metrics differ from the record's" in captured.err


def test_recorded_paths_missing_here_are_one_error_naming_field_path_and_flag(store, tmp_path, capsys):
    gone = tmp_path / "gone"
    cfg = TrialConfig(task="synthetic_translation", init="glove", pretrained=f"{gone}/glove.txt",
                      data_dir=f"{gone}/data", init_from=f"{gone}/best.pt")
    run_id = _record(store["uri"], store["exp"], cfg)
    out_dir = tmp_path / "out"
    code = main(["train", "--from-run", run_id, "--tracking-uri", store["uri"], "--data-dir", str(tmp_path),
                 "--out", str(out_dir)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()   # one a line
    assert code == 2 and lines[0] == f"embinit: error: MLflow run {run_id} recorded file inputs this machine does " \
                                     "not have:" and len(lines) == 3, err
    assert f"\n  - pretrained: the recorded path '{gone}/glove.txt' does not exist here (give --pretrained PATH" in err
    assert f"\n  - init_from: the recorded path '{gone}/best.pt' does not exist here (give --init-from PATH" in err
    assert "data_dir" not in err          # --data-dir pointed it at this machine's folder
    assert not out_dir.exists()           # nothing trained


@pytest.mark.parametrize("case, message", [
    ("unknown", "no MLflow run 'no-such-run' in sqlite:///"),
    # trial runs are not nested under their sweep's: no "child run" to look for
    ("sweep", "is a sweep run (embinit.kind=sweep): it has no embinit.config tag to re-run; give the run id of a "
              "trial run (named <label>-s<seed>, tagged embinit.trial_key), not a sweep's run; this sweep's "
              "trials are tagged embinit.sweep_run={run_id}"),
    ("no store", "no MLflow store at "),
])
def test_what_cannot_be_rerun_is_a_clear_error(case, message, store, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/absent/mlflow.db" if case == "no store" else store["uri"]
    run_id = {"unknown": "no-such-run", "sweep": store["parent"]}.get(case, store["trained"])
    code = main(["train", "--from-run", run_id, "--tracking-uri", uri, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and message.format(run_id=run_id) in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # nothing written: no store, no checkpoint


def test_another_applications_database_is_refused_not_made_a_store(tmp_path, capsys):
    """`--from-run` only reads: a SQLite file of another application once got MLflow's tables (and then
    "no MLflow run"); it is named as what it is, and left as it was."""
    from helpers.bad_stores import notes_db, snapshot
    db = notes_db(tmp_path / "notes.db")
    before = snapshot(db)
    code = main(["train", "--from-run", "abc", "--tracking-uri", f"sqlite:///{db}", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{db} is not an MLflow store: it has tables [notes]; give a new file or an MLflow store" in err
    assert snapshot(db) == before


def _parse(argv: list[str]):
    parser = argparse.ArgumentParser()
    from embinit.cli.train import register
    register(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


def test_every_config_field_round_trips_through_from_run(store, tmp_path):
    from embinit.cli.train import rerun_config
    for name in ("glove.txt", "src.txt", "best.pt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "data").mkdir()
    lm = {"like": "wikitext2", "files": {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}}
    cfg = TrialConfig(
        task="own_lm", task_def=lm, init="glove+standardize", seed=3, data_seed=4, emb_seed=5,
        init_from=str(tmp_path / "best.pt"), src_init="glove", pretrained=str(tmp_path / "glove.txt"),
        src_pretrained=str(tmp_path / "src.txt"), oov="mean", tokenizer="spacy", epochs=2, batch_size=8,
        max_tokens=500, lr=0.01, d_model=16, layers=1, heads=2, ff_dim=32, dropout=0.2, min_freq=2, max_len=20,
        pe_base=500.0, pe_positions=100, pre_ln=True, pos_encoding=False, train_embeddings=False,
        freeze_non_embeddings=True, tie_embeddings=True, early_stopping_patience=2, max_train_examples=50,
        data_dir=str(tmp_path / "data"), data_revision="v1", beam_size=2, precision="bf16", threads=2, device="cpu",
        length_penalty=1.0, cuda_graphs=True, extras={"noise": 0.1}, attention_dropout=0.1, activation_dropout=0.2)
    defaults = TrialConfig(task="synthetic_translation")
    same = [f.name for f in dataclasses.fields(TrialConfig) if getattr(cfg, f.name) == getattr(defaults, f.name)]
    assert same == [], f"give {same} a value other than the default, so that the test covers them"
    run_id = _record(store["uri"], store["exp"], cfg)
    rec, recorded, again = rerun_config(_parse(["--from-run", run_id, "--tracking-uri", store["uri"]]))
    assert again == recorded == cfg and rec.key == cfg.key()
    unregister("own_lm")


def test_flags_beside_from_run_override_the_record(store, tmp_path):
    from embinit.cli.train import rerun_config
    (tmp_path / "mine.txt").write_text("x")
    rec, recorded, cfg = rerun_config(_parse([
        "--from-run", store["trained"], "--tracking-uri", store["uri"], "--epochs", "3", "--threads", "2",
        "--device", "meta", "--data-dir", str(tmp_path), "--pretrained", str(tmp_path / "mine.txt"),
        "--extra", "train_split=valid"]))
    assert recorded == store["cfg"]
    assert (cfg.epochs, cfg.threads, cfg.device, cfg.data_dir, cfg.pretrained) == (
        3, 2, "meta", str(tmp_path), str(tmp_path / "mine.txt"))
    assert cfg.extras == {"noise": 0.2, "train_split": "valid"}       # merged: the record's switches stay
    assert dataclasses.replace(cfg, epochs=2, threads=1, device="cpu", data_dir=None, pretrained=None,
                               extras={"noise": 0.2}) == store["cfg"]   # nothing else changed


def test_a_record_whose_own_config_no_longer_gives_its_key_says_why():
    cfg = TrialConfig(task="synthetic_lm")
    rec = TrialRecord("r1", "0123456789abcdef", "synthetic_lm", "Xavier", "finished", cfg.to_dict(),
                      code_version="0")
    text = rerun.key_report(rec, cfg, cfg)
    assert text.startswith(f"different key from the record: re-run {cfg.key()}, recorded 0123456789abcdef")
    assert "fields that differ" not in text and f"recorded by code version 0, this is {CODE_VERSION}" in text


def test_a_recorded_file_pointed_at_a_copy_keeps_the_key(store, tmp_path):
    """Files count by content: the record's pretrained file, moved away and given by --pretrained, is the
    same computation; a file with other content is a different key naming `pretrained`."""
    from embinit.cli.train import rerun_config
    (tmp_path / "there").mkdir()
    original = tmp_path / "there" / "vectors.txt"
    original.write_text("der 0.1 0.2\ndie 0.3 0.4\n")
    cfg = TrialConfig(task="synthetic_translation", init="glove", src_init="xavier", pretrained=str(original))
    run_id, key = _record(store["uri"], store["exp"], cfg), cfg.key()
    copy = tmp_path / "copy.txt"
    original.rename(copy)
    args = ["--from-run", run_id, "--tracking-uri", store["uri"], "--pretrained", str(copy)]
    rec, recorded, again = rerun_config(_parse(args))
    assert rerun.key_report(rec, recorded, again).startswith(f"same key as the record: {key}")
    copy.write_text("der 0.5 0.2\ndie 0.3 0.4\n")
    rec, recorded, again = rerun_config(_parse(args))
    assert "fields that differ from the record: pretrained (recorded " in rerun.key_report(rec, recorded, again)


def test_a_copy_beside_an_override_names_only_the_overridden_field(store, tmp_path):
    """The record's file moved away and given by --pretrained (the same bytes) beside --epochs: the keys
    differ by epochs alone. The recorded file counts by the digest its run tagged (embinit.sha256.pretrained),
    not by a path this machine lacks, so neither `pretrained` nor "a file input differs" is reported."""
    from embinit.cli.train import rerun_config
    (tmp_path / "there").mkdir()
    original = tmp_path / "there" / "vectors.txt"
    original.write_text("der 0.1 0.2\ndie 0.3 0.4\n")
    cfg = TrialConfig(task="synthetic_translation", init="glove", src_init="xavier", pretrained=str(original),
                      epochs=2)
    run_id, key = _record(store["uri"], store["exp"], cfg), cfg.key()
    copy = tmp_path / "copy.txt"
    original.rename(copy)
    rec, recorded, again = rerun_config(_parse(["--from-run", run_id, "--tracking-uri", store["uri"],
                                                "--pretrained", str(copy), "--epochs", "3"]))
    text = rerun.key_report(rec, recorded, again)
    assert text == (f"different key from the record: re-run {again.key()}, recorded {key}; "
                    "fields that differ from the record: epochs (recorded 2, re-run 3)")


def test_the_verdict_tells_last_digit_differences_from_a_different_result():
    """Another machine's arithmetic moves the last digits of the same computation: that is not "not
    reproduced"; a difference beyond a relative 1e-4 is."""
    MetricRow, comparison_text = rerun.MetricRow, rerun.comparison_text
    rec = TrialRecord.__new__(TrialRecord)
    same = [MetricRow("test/loss", 1.2345678, 1.2345678), MetricRow("best/val/loss", 2.0, 2.0 * (1 + 3e-7))]
    assert "reproduced to within a relative 0.0001: 1 of 2 metrics differ in their last digits (best/val/loss)" \
        in comparison_text(rec, same, same_key=True)
    off = [MetricRow("test/loss", 1.2345678, 1.2345678), MetricRow("test/bleu", 30.0, 30.5)]
    assert "not reproduced: 1 of 2 metrics differ from the record's (test/bleu)" in comparison_text(rec, off, True)
    assert "a different key (another computation)" in comparison_text(rec, same, same_key=False)
    assert "resumed from a checkpoint" not in comparison_text(rec, off, True)


def test_a_difference_from_a_run_resumed_on_other_threads_says_so():
    """A record whose attempts trained on several thread counts (or devices) is not the computation of any
    one of them from scratch: a difference says so; an equal re-run needs no such line."""
    MetricRow, comparison_text = rerun.MetricRow, rerun.comparison_text
    rec = TrialRecord("r", "k", "multi30k", "Xavier", "finished", trained_on=("cpu, 1 thread", "cpu, 2 threads"))
    off = [MetricRow("test/bleu", 30.0, 30.5)]
    assert ("the record was resumed from a checkpoint on another device or thread count (its attempts trained "
            "on cpu, 1 thread then cpu, 2 threads)") in comparison_text(rec, off, True)
    assert "resumed" not in comparison_text(rec, [MetricRow("test/bleu", 30.0, 30.0)], True)


def test_a_translations_oov_metrics_are_compared_with_the_records():
    """A translation trial whose target vocabulary has rows the pretrained file lacks logs `oov/*` beside
    `test/*` (from its result's test metrics): the record's are read, so an exact re-run is "reproduced",
    not "4 of 9 metrics differ" against missing recorded values (Multi30k with GloVe 6B 50d did so)."""
    test = {"test/bleu": 0.0081, "test/loss": 5.53, "oov/test_sentences": 1.0, "oov/test_bleu": 1.96}
    rec = TrialRecord("r1", "0123456789abcdef", "multi30k", "GloVe", "finished",
                      metrics={**test, "best/val/loss": 5.52, "val/loss": 5.52, "oov/val_sentences": 0.0})
    rows = rerun.compared_metrics(rec, {"test": {**test, "oov/val_sentences": 0.0}, "best": {"val/loss": 5.52}})
    assert {r.name: (r.recorded, r.rerun) for r in rows} == {
        **{k: (v, v) for k, v in test.items()}, "oov/val_sentences": (0.0, 0.0), "best/val/loss": (5.52, 5.52)}
    assert "reproduced: all 6 best/* and oov/* and test/* metrics equal the record's" in \
        rerun.comparison_text(rec, rows, same_key=True)


def test_the_summary_names_the_trial_by_its_recorded_label(store, tmp_path, capsys):
    """Review C3: a quickstart "Pretrained" trial re-run said `init=GloVe` (the trainer's label) in its
    summary, under a header that said `Pretrained`: the summary now says the recorded label too."""
    cfg = dataclasses.replace(store["cfg"], epochs=1, max_train_examples=100)
    run = trial_run.TrialRun.open(store["uri"], store["exp"], None, cfg.to_dict(), cfg.key(), "Pretrained",
                                  {"axes": {}, "point": {}})
    from embinit.train import run_trial
    run.finish(run_trial(cfg, cache_dir=str(tmp_path)).to_dict(), [])
    code = main(["train", "--from-run", run.run_id, "--tracking-uri", store["uri"], "--quiet",
                 "--cache-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"re-running MLflow run {run.run_id} (Pretrained," in out
    assert "synthetic_translation Pretrained (init=Xavier src_init=Xavier) seed=1" in out, out
