"""A misspelled init, task, transform or OOV rule gets the closest valid name (difflib) in the error, the
way a user meets it: `embinit run SPEC --dry-run` (every problem at once), `embinit train`, and the
library's own calls."""

from __future__ import annotations

import pytest

from embinit.cli import main
from embinit.errors import EmbinitError, closest, did_you_mean, unknown_name
from embinit.init import parse_init_spec


def test_closest_name_or_nothing():
    assert did_you_mean("glvoe", ["glove", "xavier", "bert"]) == "; did you mean 'glove'?"
    assert did_you_mean("GLOVE_xavier", ["GloVe_Xavier", "Xavier"]) == "; did you mean 'GloVe_Xavier'?"
    assert did_you_mean("zzzz", ["glove", "xavier"]) == ""
    err = str(unknown_name("init", "glvoe", ["xavier", "glove"]))
    assert err == "'glvoe' is not a registered init; choose from ['glove', 'xavier']; did you mean 'glove'?"


def test_a_spec_with_four_misspellings_names_each_closest(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: typo\ntasks: [multi30kk]\nseeds: 1\n"
                    "inits: [glvoe, glove+standardise, {source: glove, oov: xavir}]\n")
    assert main(["run", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "'multi30kk' is not a registered task" in err and "did you mean 'multi30k'?" in err
    assert "'glvoe' is not a registered init" in err and "did you mean 'glove'?" in err
    assert "'standardise' is not a registered transform" in err and "did you mean 'standardize'?" in err
    assert "'xavir' is not a registered oov rule" in err and "did you mean 'xavier'?" in err


def test_train_with_a_misspelled_task_or_init(capsys):
    assert main(["train", "--task", "sst3", "--epochs", "1"]) == 2
    assert "did you mean 'sst2'?" in capsys.readouterr().err
    assert main(["train", "--task", "synthetic_classification", "--init", "xaviar", "--epochs", "1"]) == 2
    assert "did you mean 'xavier'?" in capsys.readouterr().err


def test_a_name_like_none_lists_the_valid_ones_and_suggests_none(capsys):
    """`embinit train --oov bogus` suggested 'focus' (difflib's 0.6: three of five letters alike); the valid
    rules are listed, and only a near miss is suggested."""
    from embinit.init.registry import OOV_INFO
    assert main(["train", "--task", "synthetic_classification", "--oov", "bogus", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert f"--oov: 'bogus' is not a registered oov rule; choose from {sorted(OOV_INFO)}" in err
    assert "did you mean" not in err
    assert did_you_mean("bogus", OOV_INFO) == ""
    assert did_you_mean("cpm", ["cmp", "mnli"]) == "; did you mean 'cmp'?"   # a swapped pair still is one


def test_build_table_oov_rule():
    from embinit.init import build_table
    with pytest.raises(EmbinitError, match=r"'zeroes' is not a registered oov rule.*did you mean 'zeros'\?"):
        build_table(parse_init_spec("glove"), ["a", "b"], oov="zeroes")


def test_a_misspelled_tokenizer_is_a_note_in_the_dry_run(tmp_path, capsys, monkeypatch):
    """'spacey' has the shape of a Hugging Face hub id, which the trials would try (the service asks the
    hub at submit); online, the dry run cannot tell, so it says which name is close instead of refusing.
    Offline, with no such model in the hub cache, every trial would fail: refused, with the close name."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))   # empty
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: typo\ntasks: [synthetic_translation]\nseeds: 2\ninits: [xavier]\n"
                    "axes: {tokenizer: [whitespace, spacey]}\n")
    assert main(["run", str(spec), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("note: tokenizer") == 1
    assert "note: tokenizer 'spacey' will be loaded as a Hugging Face hub id" in out
    close = "'spacey' is not a registered tokenizer; choose from ['gpt2', 'spacy', 'whitespace']; did you mean 'spacy'?"
    assert close in out
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["run", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"trials synthetic_translation x Xavier: tokenizer 'spacey': 'spacey' is not in the Hugging Face cache " \
           f"{tmp_path / 'hub'} at any revision; HF_HUB_OFFLINE is set, so the hub is not asked; nor a tokenizer " \
           f"name: {close}" in err


def test_a_short_name_that_is_part_of_one_valid_name_is_suggested():
    """At 0.65 likeness difflib finds nothing for a short name against a long one (`acc` / `val/acc` is
    0.6): the one valid name whose last '/' part, or whose beginning, it is, is suggested; a part of
    several names, or under 3 characters, is not."""
    metrics = ["val/acc", "val/loss", "test/bleu"]
    assert closest("acc", metrics) == "val/acc"
    assert closest("ppl", ["val/ppl", "val/loss"]) == "val/ppl"
    assert closest("early_stop", ["early_stopping_patience", "epochs", "lr"]) == "early_stopping_patience"
    assert closest("val", metrics) is None and closest("ep", ["epochs"]) is None
    assert closest("bogus", ["xavier", "mean", "mean_cov", "subword_mean", "zeros", "focus"]) is None
