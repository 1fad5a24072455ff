"""`embinit train`: one trial from the command line, JSON output, summary, clear errors."""

import json

import pytest

from embinit.cli import main


@pytest.mark.slow
def test_train_json_and_checkpoints(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--task", "synthetic_translation", "--epochs", "2", "--max-train-examples", "300",
                 "--threads", "1", "--seed", "1", "--out", str(out), "--cache-dir", str(tmp_path / "c"),
                 "--json"])
    captured = capsys.readouterr()
    assert code == 0
    result = json.loads(captured.out)
    assert result["status"] == "finished" and len(result["history"]) == 2
    assert result["config"]["seed"] == 1 and result["config"]["max_train_examples"] == 300
    assert "test/bleu" in result["test"] and result["bleu_signature"]
    assert (out / "best.pt").is_file() and (out / "last.pt").is_file()
    assert "epoch 2/2" in captured.err  # the progress bar goes to stderr


@pytest.mark.slow
def test_train_summary_and_switches(tmp_path, capsys):
    code = main(["train", "--task", "synthetic_classification", "--epochs", "1", "--threads", "1",
                 "--no-pos-encoding", "--freeze-embeddings", "--precision", "bf16", "--quiet",
                 "--cache-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0
    assert "status: finished" in captured.out and "val/acc=" in captured.out
    assert captured.err == ""


@pytest.mark.slow
def test_the_summary_says_how_little_of_the_vocabulary_a_source_covers(tmp_path, capsys):
    """A vectors file that barely overlaps the data trained a Xavier table labelled GloVe; the summary
    gave no hint (the coverage was in the JSON and MLflow only)."""
    from embinit.init import testing as tt
    vectors = tt.write_text(tmp_path / "v.txt", tt.word_vectors(["zzqx", "the"], dim=32))
    code = main(["train", "--task", "synthetic_classification", "--epochs", "1", "--threads", "1", "--quiet",
                 "--init", "glove", "--pretrained", str(vectors), "--cache-dir", str(tmp_path / "c")])
    out = capsys.readouterr().out
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("pretrained coverage: "))
    rows, total = int(line.split()[2]), int(line.split()[4])
    assert rows <= 4 < total and "vocabulary rows (" in line and "of the training tokens" in line


def test_the_coverage_line_says_its_token_share_leaves_out_unk_tokens():
    """On Multi30k (1,500 pairs, min_freq 2) GloVe had 1073 of 1077 target rows and the summary said "100.0% of
    the training tokens", while 6.6% of them were <unk> (words below min_freq, which no source row covers):
    the share counts the vocabulary's words only. It now says so; a coverage without a token share (a
    vocabulary without counts) prints the rows alone instead of failing with a KeyError."""
    from embinit.cli.train import _coverage_lines
    cov = {"rows_found": 1073, "rows_total": 1077, "row_share": 1073 / 1077, "token_share": 1.0,
           "duplicate_words": 0}
    (line,) = _coverage_lines({"tgt": cov})
    assert line == ("pretrained coverage (tgt): 1073 of 1077 vocabulary rows (99.6%), 100.0% of the training "
                    "tokens of vocabulary words (those read as <unk> not counted)")
    for share in (None, "absent"):
        rows_only = {k: v for k, v in cov.items() if k != "token_share"}
        if share is None:
            rows_only["token_share"] = None
        assert _coverage_lines(rows_only) == ["pretrained coverage: 1073 of 1077 vocabulary rows (99.6%)"]


@pytest.mark.slow
def test_the_summary_and_the_trial_count_the_words_the_file_repeats(tmp_path, capsys):
    """A vectors file with a word twice silently used its first row: the summary, the result's coverage and
    its init statistics (MLflow's `coverage/*` and `init/emb/coverage_*`) now count such words."""
    vectors = tmp_path / "v.txt"
    vectors.write_text("".join(f"{w} " + " ".join(["0.5"] * 32) + "\n" for w in ("the", "zzqx", "the")))
    args = ["train", "--task", "synthetic_classification", "--epochs", "1", "--threads", "1", "--quiet",
            "--init", "glove", "--pretrained", str(vectors), "--cache-dir", str(tmp_path / "c")]
    with pytest.warns(RuntimeWarning, match="'the' \\(lines 1, 3\\)"):
        assert main(args) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("pretrained coverage: "))
    assert line.endswith("; 1 of its words occur more than once in the file (each takes its first row)")
    with pytest.warns(RuntimeWarning):
        assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["coverage"]["duplicate_words"] == 1
    assert result["emb_stats_init"]["emb/coverage_duplicate_words"] == 1.0


@pytest.mark.parametrize("args, message", [
    (["--task", "nope"], "'nope' is not a registered task"),
    (["--task", "synthetic_lm", "--heads", "5"], "heads=5 does not divide d_model=32"),
    (["--task", "synthetic_lm", "--extra", "bogus=1"], "unknown extras key 'bogus'"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys):
    code = main(["train", *args, "--threads", "1", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_emb_seed_and_pe_positions_reach_the_trial_config():
    import argparse

    from embinit.cli.train import config_from_args, register
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    cfg = config_from_args(parser.parse_args(["train", "--task", "synthetic_lm", "--emb-seed", "7",
                                              "--pe-positions", "2000"]))
    assert (cfg.seed, cfg.emb_seed, cfg.pe_positions) == (0, 7, 2000)
    assert config_from_args(parser.parse_args(["train", "--task", "synthetic_lm"])).pe_positions == 5000


@pytest.mark.parametrize("args, messages", [
    # a Xavier model whose config would name a GloVe file it never read
    (["--task", "synthetic_classification", "--pretrained", "/nonexistent/glove.txt"],
     ["--pretrained: '/nonexistent/glove.txt' is set but the init 'xavier' draws from no pretrained source"]),
    (["--task", "synthetic_classification", "--src-init", "glove"],
     ["--src-init: only translation tasks have a source side"]),
    (["--task", "synthetic_classification", "--oov", "meen"],
     ["--oov: 'meen' is not a registered oov rule", "did you mean 'mean'?"]),
    (["--task", "synthetic_translation", "--src-init", "xavier", "--src-pretrained", "/x/g.txt"],
     ["--src-pretrained: '/x/g.txt' is set but the src init 'xavier' draws from no pretrained source"]),
    (["--task", "synthetic_classification", "--init", "glove", "--pretrained", "/nonexistent/glove.txt"],
     ["--pretrained: '/nonexistent/glove.txt' does not exist"]),
    # a pretrained init without its file, and a seed out of range: named by this command's options
    (["--task", "synthetic_classification", "--init", "glove"],
     ["--init: 'glove' needs a pretrained file: pass its path with --pretrained PATH;"]),
    (["--task", "synthetic_translation", "--src-init", "glove"],
     ["--src-init: 'glove' needs a pretrained file: pass its path with --src-pretrained PATH;"]),
    (["--task", "synthetic_classification", "--seed", "-1"],
     ["embinit: error: cannot train this trial (1 problem): --seed: Input should be greater than or equal to 0, "
      "got -1;"]),
])
def test_options_that_do_not_apply_are_refused_before_training(args, messages, tmp_path, capsys):
    code = main(["train", *args, "--threads", "1", "--epochs", "1", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    for message in messages:
        assert message in err


@pytest.mark.parametrize("init_flags, flag", [(["--init", "glvoe"], "--init"),
                                              (["--src-init", "glvoe", "--src-pretrained", "/x/g.txt"], "--src-init")])
def test_a_misspelled_init_is_listed_with_the_other_problems_of_the_flags(init_flags, flag, tmp_path, capsys):
    """The init's problem was raised alone while the list was being worded (the flag's source family was
    looked up for each problem), so a bad --epochs or --seed came one run later."""
    code = main(["train", "--task", "synthetic_translation", *init_flags, "--epochs", "0", "--seed", "-1",
                 "--cache-dir", str(tmp_path)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and lines[0].startswith("embinit: error: cannot train this trial ("), lines
    assert f"  - {flag}: 'glvoe' is not a registered init; choose from" in "\n".join(lines)
    assert "  - --epochs: Input should be greater than or equal to 1, got 0" in lines
    assert "  - --seed: Input should be greater than or equal to 0, got -1" in lines


def test_train_lists_every_problem_of_the_data_folder_and_the_model_size(tmp_path, capsys):
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\t1\n")
    (tmp_path / "g.txt").write_text("good 0.1 0.2 0.3\n")
    code = main(["train", "--task", "sst2", "--init", "glove", "--pretrained", str(tmp_path / "g.txt"),
                 "--d-model", "4", "--data-dir", str(tmp_path / "sst2"), "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--data-dir: sst2: data folder" in err and "lacks dev.tsv" in err
    assert "dimension 3 but the model's d_model is 4" in err


def test_model_size_problems_name_the_flags_not_the_spec_fields(tmp_path, capsys):
    """`embinit train --heads 7` said "the D of inits[0]" and "set `d_model` on the task", and a source
    whose D contradicts --d-model said "set `d_model`": a spec's words; the command has flags."""
    code = main(["train", "--task", "synthetic_translation", "--heads", "7", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--heads: heads=7 does not divide d_model=32, the D of --init (Xavier, " in err
    assert "choose heads from [1, 2, 4, 8, 16, 32], or set --d-model to a multiple of the heads" in err
    (tmp_path / "g.txt").write_text("the 0.1 0.2 0.3\n")
    code = main(["train", "--task", "synthetic_classification", "--init", "glove", "--pretrained",
                 str(tmp_path / "g.txt"), "--d-model", "4", "--cache-dir", str(tmp_path)])
    err2 = capsys.readouterr().err
    # the one trial is not named ("--d-model: trials synthetic_classification x GloVe: the init has ...")
    assert code == 2 and "--d-model: the init has dimension 3 but the model's d_model is 4; set --d-model to the " \
                         "source's D or leave it out" in err2
    for spec_word in ("inits[0]", "`d_model`", "on the task"):
        assert spec_word not in err + err2


def test_a_model_size_the_trial_refuses_names_the_flags_too(monkeypatch, capsys):
    """A hub source's D is read by the trial, not by the check before it: its "set `d_model` to the source's
    D" came through in the spec's words."""
    import embinit.train
    from embinit.model_dims import SizeError

    def refuse(cfg, **kw):
        raise SizeError("the init has dimension 768 but the model's d_model is 512; set `d_model` to the source's "
                        "D or leave it out (the source's D is used)", ("d_model",))
    monkeypatch.setattr(embinit.train, "run_trial", refuse)
    assert main(["train", "--task", "synthetic_classification", "--d-model", "512", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "d_model is 512; set --d-model to the source's D or leave it out" in err and "`d_model`" not in err


def test_train_lists_settings_no_trial_may_combine_with_its_other_problems(tmp_path, capsys):
    """The spec's check (which `embinit train` runs first) knows the trainer's rules across fields."""
    (tmp_path / "sst2").mkdir()
    code = main(["train", "--task", "sst2", "--freeze-embeddings", "--freeze-non-embeddings",
                 "--data-dir", str(tmp_path / "sst2"), "--cache-dir", str(tmp_path)])
    lines = capsys.readouterr().err.strip().splitlines()
    # one problem a line, as `embinit run` lists a spec's
    assert code == 2 and lines[0] == "embinit: error: cannot train this trial (2 problems):", lines
    assert lines[1] == "  - train_embeddings=False with freeze_non_embeddings=True leaves nothing to train"
    assert lines[2].startswith("  - --data-dir: sst2: data folder")
    assert lines[3:] == ["  model sizes not checked until the problems above are fixed"]


@pytest.mark.parametrize("text, problem", [
    ("like: sst2\nfiles: {train: train.csv\n", "at line 3, column 1: expected ',' or '}', but got '<stream end>' "
                                                "(while parsing a flow mapping at line 2, column 8)"),
    ("like: sst2\nlike: mnli\n", "at line 2, column 1: 'like' is given twice (first at line 1) (while reading a "
                                 "mapping at line 1, column 1)"),   # the last one won, silently
])
def test_a_task_definition_file_that_is_no_yaml_is_one_line_naming_where(text, problem, tmp_path, capsys):
    """PyYAML's own message was five lines of "in '<unicode string>'" with a caret."""
    path = tmp_path / "imdb.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit):
        main(["train", "--task", "imdb", "--task-def", str(path), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"embinit train: error: argument --task-def: cannot read a task definition: not valid YAML in "
                       f"{str(path)!r} {problem}")


def test_a_task_definition_file_that_is_not_utf8_names_its_line_and_the_fix(tmp_path, capsys):
    """It gave Python's codec message ("'utf-8' codec can't decode byte 0xe9 in position 16")."""
    path = tmp_path / "imdb.yaml"
    path.write_bytes(b"like: sst2\nlabel_names: [caf\xe9, ok]\n")
    with pytest.raises(SystemExit):
        main(["train", "--task", "imdb", "--task-def", str(path), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"cannot read a task definition: {path}:2: not UTF-8: byte 0xe9 at column 18" in err and "iconv" in err


def test_a_task_definition_file_lists_its_problems_one_a_line(tmp_path, capsys):
    path = tmp_path / "imdb.yaml"
    path.write_text("like: nope\nfiles: {train: train.csv}\nlabel: [a, b]\n")
    code = main(["train", "--task", "imdb", "--task-def", str(path), "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and lines[0] == f"embinit: error: --task-def {path}:", lines
    assert any(line.startswith("  - like: 'nope' is not a built-in task") for line in lines[1:])
    assert any(line.startswith("  - label: unknown field") for line in lines[1:])


def test_every_trial_config_field_has_a_train_flag():
    """The flags are written by hand: a field added to TrialConfig without one could not be set, nor
    overridden beside --from-run (data_seed and tie_embeddings had none)."""
    import argparse
    import dataclasses

    from embinit.cli import train
    from embinit.config import TrialConfig
    parser = argparse.ArgumentParser()
    train.register(parser.add_subparsers())
    args = parser.parse_args(["train", "--task", "synthetic_lm", "--data-seed", "7", "--tie-embeddings",
                              "--emb-seed", "3", "--extra", "k=1"])
    given = train.given_fields(args)
    assert (given["data_seed"], given["tie_embeddings"], given["emb_seed"]) == (7, True, 3)
    settable = set(train.FIELD_FLAGS) | {field for field, _ in train._SWITCHES.values()} | {"extras"}
    missing = sorted({f.name for f in dataclasses.fields(TrialConfig)} - settable)
    assert missing == [], f"TrialConfig fields with no `embinit train` flag: {missing}"
    for name in train.FIELD_FLAGS:   # each named field's flag exists and lands on that field
        assert hasattr(args, name), name
    cfg = train.config_from_args(args)
    assert (cfg.data_seed, cfg.tie_embeddings) == (7, True) and cfg.key() != TrialConfig(task="synthetic_lm").key()


def test_src_pretrained_defaults_to_pretrained_for_a_pretrained_source_init(tmp_path):
    """`--src-pretrained` defaults to `--pretrained` (its help, and the trial's config); the check refused
    `--init glove --src-init glove --pretrained FILE` for want of a source-side file."""
    import argparse

    from embinit.cli.train import config_from_args, register
    from embinit.cli.train_checks import as_spec, check_args
    (tmp_path / "g.txt").write_text("the 0.1 0.2 0.3 0.4\n")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())

    def cfg(*more):
        return config_from_args(parser.parse_args(["train", "--task", "synthetic_translation", "--heads", "1",
                                                   "--pretrained", str(tmp_path / "g.txt"), *more]))
    both = cfg("--init", "glove", "--src-init", "glove")
    check_args(both)
    assert as_spec(both)["inits"][0]["src_pretrained"] == str(tmp_path / "g.txt")
    assert "src_pretrained" not in as_spec(cfg("--init", "glove", "--src-init", "xavier"))["inits"][0]
    check_args(cfg("--init", "glove", "--src-init", "xavier"))


@pytest.mark.slow
def test_train_says_an_oov_rule_does_not_apply_to_a_table_without_missing_rows(tmp_path, capsys):
    """`embinit train --init xavier --oov zeros` (and glove+match) said nothing: the rule changes no row,
    the trial is the default rule's. It says so on stderr as `embinit embeddings stats` does; the trial
    and its key are unchanged."""
    from embinit.config import TrialConfig
    from embinit.init import testing as tt
    vectors = tt.write_text(tmp_path / "v.txt", tt.word_vectors(["the", "a", "dog"], dim=32))
    argv = ["train", "--task", "synthetic_classification", "--epochs", "1", "--max-train-examples", "64",
            "--threads", "1", "--quiet", "--json", "--cache-dir", str(tmp_path / "c")]
    for init, label in (("xavier", "Xavier"), ("glove+match", "Xavier_GloVe")):
        extra = ["--init", init, "--pretrained", str(vectors)] if init != "xavier" else ["--init", init]
        assert main(argv + extra + ["--oov", "zeros"]) == 0
        captured = capsys.readouterr()
        assert f"note: --oov zeros does not apply to {label} ({init}): no row of its table" in captured.err
        plain = TrialConfig(task="synthetic_classification", init=init, epochs=1, max_train_examples=64, threads=1,
                            pretrained=str(vectors) if init != "xavier" else None)   # no --oov: the default rule
        assert json.loads(captured.out)["key"] == plain.key()
    assert main(argv + ["--init", "glove", "--pretrained", str(vectors), "--oov", "zeros"]) == 0
    assert "does not apply" not in capsys.readouterr().err


def test_the_summary_labels_an_oov_rule_as_a_sweep_does():
    """`embinit train --init glove --oov zeros` printed `init=GloVe`, where a sweep labels the same init
    `GloVe oov=zeros`; a rule that fills no row (a random init's) or the default one is not said."""
    from embinit.cli.train import summary
    from embinit.spec import InitEntry
    from embinit.train.result import TrialResult

    def line(init, oov, label, src_init=None, src_label=None):
        config = {"task": "sst2", "init": init, "src_init": src_init, "oov": oov, "seed": 0, "d_model": 300,
                  "heads": 10}
        return summary(TrialResult(config=config, key="k", label=label, src_label=src_label)).splitlines()[0]
    entry = InitEntry(tgt={"source": "glove", "oov": "zeros"})
    assert f"init={entry.label_for(False)} seed=0" in line("glove", "zeros", "GloVe")
    assert "init=GloVe oov=zeros seed=0" in line("glove", "zeros", "GloVe")
    assert "init=GloVe seed=0" in line("glove", "xavier", "GloVe")
    assert "init=Xavier seed=0" in line("xavier", "zeros", "Xavier")
    assert "init=Xavier_GloVe seed=0" in line("glove+match", "mean", "Xavier_GloVe")
    assert "init=GloVe src_init=Xavier oov=mean seed=0" in line("glove", "mean", "GloVe", "xavier", "Xavier")


def test_the_summary_says_a_recorded_label_beside_the_trainer_s():
    """Review C3: `train --from-run` of a quickstart "Pretrained" trial said `(Pretrained, ...)` in its
    header but `init=GloVe` in the summary. Given the record's label, the summary says both."""
    from embinit.cli.train import summary
    from embinit.train.result import TrialResult
    config = {"task": "sst2", "init": "glove", "src_init": None, "oov": "zeros", "seed": 0, "d_model": 300,
              "heads": 10}
    result = TrialResult(config=config, key="k", label="GloVe")
    assert "sst2 Pretrained (init=GloVe oov=zeros) seed=0" in summary(result, label="Pretrained")
    assert "sst2 init=GloVe oov=zeros seed=0" in summary(result, label="GloVe")   # the same: said once
    assert summary(result).splitlines()[0] == summary(result, label=None).splitlines()[0]


class _Stream:
    def __init__(self, tty: bool):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, s):
        self.text += s

    def flush(self):
        pass


def test_progress_is_a_line_per_epoch_where_stderr_is_not_a_terminal():
    """Review C3: without --quiet, tqdm's per-batch redraws flooded a log file. Off a terminal the bar
    gives one line per epoch with its metrics; on a terminal, the bar."""
    from types import SimpleNamespace

    from embinit.cli.train import ProgressBar
    ctx = SimpleNamespace(epoch=1, epoch_steps=50, cfg=SimpleNamespace(epochs=2))

    def run(bar):
        for epoch in (1, 2):
            ctx.epoch = epoch
            for step in range(1, 51):
                bar.on_step_end(ctx, step, 0.5)
            bar.on_epoch_end(ctx, epoch, {"train/loss": 0.5, "val/acc": 0.75, "epoch": epoch})
        bar.on_train_end(ctx, None)
    log = _Stream(tty=False)
    run(ProgressBar(stream=log))
    assert log.text == "epoch 1/2: train_loss=0.5, val_acc=0.75\nepoch 2/2: train_loss=0.5, val_acc=0.75\n"
    quiet = _Stream(tty=False)
    run(ProgressBar(False, stream=quiet))
    assert quiet.text == ""
    term = _Stream(tty=True)
    run(ProgressBar(stream=term))
    assert "epoch 1/2" in term.text and "50/50" in term.text
