"""tune_configs/gpu/cut_vectors.py: a GloVe file cut to the words of the texts gives the same init tables
(found rows, their statistics, the standardized and matched variants) as the whole file."""

import importlib.util
from pathlib import Path

import pytest
import torch

from embinit.init.table import build_table

TOOL = Path(__file__).resolve().parents[1] / "tune_configs" / "gpu" / "cut_vectors.py"


def tool():
    spec = importlib.util.spec_from_file_location("cut_vectors", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cut_keeps_the_texts_words_in_file_order_and_the_tables(tmp_path, capsys):
    g = torch.Generator().manual_seed(0)
    words = ["the", "dog", "zebra", "runs", ",", "n't", "quokka", "park", "."]
    glove = tmp_path / "glove.txt"
    glove.write_text("".join(f"{w} " + " ".join(f"{x:.4f}" for x in torch.randn(4, generator=g).tolist()) + "\n"
                             for w in words))
    text = tmp_path / "train.en"
    text.write_text("The dog runs, doesn't it.\nA Park\n")
    out = tmp_path / "cut" / "glove.txt"
    tool().main([str(glove), str(out), str(text)])
    kept = [line.split(" ", 1)[0] for line in out.read_text().splitlines()]
    assert kept == ["the", "dog", "runs", ",", "n't", "park", "."]      # the file's order, no others
    assert "7 of 9 lines" in capsys.readouterr().out
    vocab = ["<pad>", "the", "dog", "runs", "park", "cat"]
    for spec in ("glove", "glove+standardize", "glove+match", "glove+shuffle"):
        a = build_table(spec, vocab, seed=1, pretrained=str(glove), cache_dir=False)
        b = build_table(spec, vocab, seed=1, pretrained=str(out), cache_dir=False)
        assert torch.equal(a.table, b.table), spec


def test_cut_names_every_missing_input(tmp_path):
    with pytest.raises(SystemExit, match="not a file: .*nope.txt, .*gone.en"):
        tool().main([str(tmp_path / "nope.txt"), str(tmp_path / "o.txt"), str(tmp_path / "gone.en")])
