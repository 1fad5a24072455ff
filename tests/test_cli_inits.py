"""`embinit inits` and `embinit embeddings stats`: a table for people, --json for programs, and
one-line errors with exit code 2."""

import json
from pathlib import Path

import torch

from embinit.cli import main
from embinit.init import DESCRIPTIONS, build_table
from embinit.init import testing as tt
from embinit.stats import PETable, embedding_stats
from embinit.vocab import Vocab

EXAMPLE = Path(__file__).parent / "data" / "example_vocab.txt"


def test_inits_lists_every_registered_name(capsys):
    assert main(["inits"]) == 0
    out = capsys.readouterr().out
    for group in DESCRIPTIONS.values():
        for name, desc in group.items():
            assert any(line.split()[:1] == [name] and desc in line for line in out.splitlines()), name


def test_inits_json(capsys):
    assert main(["inits", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == DESCRIPTIONS


def test_stats_table_for_the_readme_example(capsys):
    assert main(["embeddings", "stats", "--vocab", str(EXAMPLE), "--init", "xavier", "--dim", "300"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Xavier")
    expected = embedding_stats(build_table("xavier", Vocab.load(EXAMPLE), dim=300, seed=0).table)
    rows = dict(line.split() for line in out.splitlines() if line.startswith("emb/"))
    assert set(rows) == set(expected)
    assert float(rows["emb/std"]) == float(f"{expected['emb/std']:.6g}")


def test_stats_json_with_a_pretrained_source(capsys, tmp_path):
    vectors = tt.word_vectors(["a", "the", "in", "man", "dog"], dim=4)
    path = tt.write_text(tmp_path / "g.txt", vectors)
    argv = ["embeddings", "stats", "--vocab", str(EXAMPLE), "--init", "glove+standardize", "--pretrained",
            str(path), "--oov", "mean", "--seed", "3", "--cache-dir", str(tmp_path / "c"), "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["label"] == "GloVe_Xavier" and data["dim"] == 4 and data["oov"] == "mean"
    assert data["coverage"]["rows_found"] == 5 and 0 < data["coverage"]["token_share"] < 1
    res = build_table("glove+standardize", Vocab.load(EXAMPLE), pretrained=str(path), oov="mean", seed=3,
                      cache_dir=False)
    assert data["stats"] == embedding_stats(res.table, coverage=res.coverage)
    assert torch.isfinite(res.table).all()


def test_stats_says_an_oov_rule_does_not_apply_to_a_table_without_missing_rows(capsys, tmp_path):
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(["a", "the", "in", "man", "dog"], dim=4))
    for init, label in (("xavier", "Xavier"), ("glove+match", "Xavier_GloVe")):
        argv = ["embeddings", "stats", "--vocab", str(EXAMPLE), "--init", init, "--dim", "4", "--pretrained",
                str(path), "--cache-dir", str(tmp_path / "c"), "--json"]
        assert main(argv + ["--oov", "zeros"]) == 0
        zeros = capsys.readouterr()
        assert f"note: --oov zeros does not apply to {label} ({init})" in zeros.err
        assert main(argv) == 0
        plain = capsys.readouterr()
        assert json.loads(zeros.out) == json.loads(plain.out) and plain.err == ""   # the same table
    assert main(["embeddings", "stats", "--vocab", str(EXAMPLE), "--init", "glove", "--pretrained", str(path),
                 "--oov", "zeros"]) == 0
    assert "does not apply" not in capsys.readouterr().err


def test_stats_absorption_target_and_statistic_share_the_pe_table_given(capsys):
    argv = ["embeddings", "stats", "--vocab", str(EXAMPLE), "--init", "xavier+rescale=absorption:0.5", "--dim",
            "16", "--pe-length", "512", "--pe-base", "1000", "--json"]
    assert main(argv) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert abs(stats["emb/absorption"] - 0.5) < 1e-6
    assert stats == embedding_stats(build_table("xavier+rescale=absorption:0.5", Vocab.load(EXAMPLE), dim=16,
                                                seed=0, pe=PETable(512, 1000.0)).table, 512, 1000.0)


def test_errors_are_one_line_with_exit_2(capsys, tmp_path):
    assert main(["embeddings", "stats", "--vocab", str(EXAMPLE), "--init", "glvoe", "--dim", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'glvoe' is not a registered init" in err and "Traceback" not in err
    missing = tmp_path / "missing.txt"
    assert main(["embeddings", "stats", "--vocab", str(EXAMPLE), "--init", "glove", "--pretrained",
                 str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err


def test_stats_refuses_focus_saying_where_it_can_be_measured(capsys, tmp_path):
    """`embinit embeddings stats --oov focus` failed with the library's hint, "build_table(..., corpus=[[token,
    ...], ...]) (the trainer passes each side's training split)", which names no option of the command. It
    now says the command has no training text and which command measures that table."""
    path = tt.write_text(tmp_path / "g.txt", tt.word_vectors(["a", "the", "in", "man", "dog"], dim=4))
    argv = ["embeddings", "stats", "--vocab", str(EXAMPLE), "--init", "glove", "--pretrained", str(path),
            "--oov", "focus", "--cache-dir", str(tmp_path / "c")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "build_table" not in err and "embinit train --task TASK --init ... --oov focus" in err
    assert err.startswith("embinit: error: --oov focus learns its fastText vectors from a task's training text")
    # where no row is left for a rule (match), focus changes nothing, as any rule: the note, not an error
    argv[argv.index("glove")] = "glove+match"
    assert main(argv) == 0 and "--oov focus does not apply" in capsys.readouterr().err


def test_inits_says_a_zip_of_a_vector_file_is_read_as_it_is(capsys, tmp_path):
    """`embinit inits` describes each word-vector family's files as the loader reads them: .gz, or a zip
    archive holding the one file (as glove.840B.300d.zip and crawl-300d-2M.vec.zip are published)."""
    import zipfile

    words = ["a", "the", "in", "man", "dog"]
    text = tt.write_text(tmp_path / "g.txt", tt.word_vectors(words, dim=4))
    with zipfile.ZipFile(tmp_path / "g.zip", "w") as z:
        z.write(text, "g.txt")
    argv = ["embeddings", "stats", "--vocab", str(EXAMPLE), "--init", "glove", "--pretrained",
            str(tmp_path / "g.zip"), "--cache-dir", str(tmp_path / "c"), "--json"]
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["coverage"]["rows_found"] == len(words)
    for family in ("glove", "word2vec", "fasttext"):
        desc = DESCRIPTIONS["sources"][family]
        assert ".gz" in desc and ".zip" in desc, family
