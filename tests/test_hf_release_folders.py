"""Hugging Face model folders as their publishers ship them, on tiny folders written here: Google's T5 and mT5
hold their tokenizer as a SentencePiece model alone (spiece.model, no tokenizer.json)."""

import json

import pytest

from embinit.errors import EmbinitError
from embinit.tasks import tokenization


def mt5_folder(folder):
    """config.json, spiece.model and tokenizer_config.json, as google/mt5-small ships them (no weights are
    read before the tokenizer)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "mt5", "d_model": 8, "d_kv": 4, "d_ff": 16, "num_layers": 1, "num_heads": 2,
        "vocab_size": 16, "tie_word_embeddings": False}))
    (folder / "spiece.model").write_bytes(b"\n\x0b\n\x05<pad>\x15\x00\x00\x00\x00\x18\x03")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer"}))
    return folder


@pytest.fixture
def no_sentencepiece(monkeypatch):
    monkeypatch.setattr(tokenization, "_has_sentencepiece", lambda: False)


def test_spec_check_names_the_missing_sentencepiece_package(tmp_path, no_sentencepiece):
    from embinit.spec.vector_files import vector_file_problems
    folder = mt5_folder(tmp_path / "mt5-small")
    [(where, why)] = vector_file_problems([("pretrained.mt5", str(folder))])
    assert where == "pretrained.mt5"
    assert "spiece.model" in why and "pip install sentencepiece" in why and str(folder) in why
    assert "pip install sentencepiece" in tokenization.local_tokenizer_problem(str(folder))


def test_spec_check_passes_the_folder_with_a_tokenizer_json_or_the_package(tmp_path, monkeypatch):
    from embinit.spec.vector_files import vector_file_problems
    folder = mt5_folder(tmp_path / "mt5-small")
    monkeypatch.setattr(tokenization, "_has_sentencepiece", lambda: True)
    assert vector_file_problems([("pretrained.mt5", str(folder))]) == []
    monkeypatch.setattr(tokenization, "_has_sentencepiece", lambda: False)
    (folder / "tokenizer.json").write_text("{}")
    assert vector_file_problems([("pretrained.mt5", str(folder))]) == []


def test_loading_the_rows_names_sentencepiece_not_tiktoken(tmp_path, no_sentencepiece):
    pytest.importorskip("transformers")
    from embinit.init.hf import load_model_embeddings
    folder = mt5_folder(tmp_path / "mt5-small")
    with pytest.raises(EmbinitError, match="pip install sentencepiece") as e:
        load_model_embeddings(str(folder))
    assert "tiktoken" not in str(e.value)
