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
