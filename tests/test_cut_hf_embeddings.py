"""tune_configs/gpu/cut_hf_embeddings.py: a model folder cut to its config, tokenizer and input embedding
gives embinit the same matrix and the same aligned rows as the whole folder."""

import importlib.util
from pathlib import Path

import pytest
import torch

TOOL = Path(__file__).resolve().parents[1] / "tune_configs" / "gpu" / "cut_hf_embeddings.py"
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "good", "bad", "##s", "un", "##real"]


def tool():
    spec = importlib.util.spec_from_file_location("cut_hf_embeddings", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def tiny_bert(tmp_path):
    from transformers import BertConfig, BertModel, BertTokenizerFast
    folder = tmp_path / "tiny-bert"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    tok = BertTokenizerFast(vocab=str(folder / "vocab.txt"))   # transformers 5 ignores a `vocab_file`...
    if len(tok.get_vocab()) != len(WORDS):
        tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))   # ... which transformers 4 reads
    assert len(tok.get_vocab()) == len(WORDS)   # not a tokenizer of the special tokens alone (all [UNK])
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(WORDS), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=16)).save_pretrained(folder)
    return folder


def test_the_cut_folder_gives_the_same_embedding_and_rows(tiny_bert, tmp_path, capsys):
    from safetensors import safe_open
    from embinit.init.hf import load_hf, load_model_embeddings
    out = tmp_path / "cut" / "tiny-bert"
    tool().main([str(tiny_bert), str(out)])
    assert "embeddings.word_embeddings.weight [12, 8]" in capsys.readouterr().out
    with safe_open(str(out / "model.safetensors"), "pt") as st:
        assert list(st.keys()) == ["embeddings.word_embeddings.weight"]        # nothing but the matrix
    assert torch.equal(load_model_embeddings(str(tiny_bert))[1], load_model_embeddings(str(out))[1])
    tokens = ["<pad>", "<unk>", "the", "movies", "unreal", "good", "zebra"]
    a, b = load_hf(str(tiny_bert), tokens), load_hf(str(out), tokens)
    assert torch.equal(a.rows, b.rows) and torch.equal(a.found, b.found)
    assert len(a.found) >= 4   # the words the vocabulary has (the, movie+s, un+real, good) have rows


def test_names_what_the_source_lacks(tmp_path):
    with pytest.raises(SystemExit, match="config.json: missing; .*model.safetensors: missing"):
        tool().main([str(tmp_path), str(tmp_path / "out")])
