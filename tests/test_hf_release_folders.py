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


def test_a_google_style_mt5_folder_loads_its_rows_and_tokenizes(tmp_path):
    """sentencepiece is a dependency: google/mt5-small's folder (spiece.model, no tokenizer.json), the
    paper's mT5 source, loads here, its rows the checkpoint's input table (`shared`, not the untied lm_head),
    and tokenizes a task's text."""
    import sentencepiece as spm
    import torch
    from transformers import MT5Model, T5Config
    from embinit.init.hf import load_model_embeddings
    from embinit.tasks.tokenizer_backends import load_backend
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["a man in a blue shirt is standing on a ladder", "two dogs play in the snow",
                                 "ein Mann steht auf einer Leiter", "zwei Hunde spielen im Schnee"] * 50))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "spiece"), vocab_size=40,
                                   pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    folder = tmp_path / "mt5-small"
    model = MT5Model(T5Config(vocab_size=40, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2,
                              decoder_start_token_id=0, tie_word_embeddings=False))
    model.save_pretrained(folder)
    (folder / "spiece.model").write_bytes((tmp_path / "spiece.model").read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer"}))
    assert not (folder / "tokenizer.json").exists()
    assert tokenization.local_tokenizer_problem(str(folder)) is None
    tok, rows = load_model_embeddings(str(folder))
    assert torch.equal(rows, model.shared.weight.detach())
    backend = load_backend(tokenization.resolve_tokenizer(str(folder)))
    (tokens,) = backend.tokenize_batch(["two dogs in the snow"])
    assert tokens[0].startswith("▁") and backend.to_string(tokens).strip() == "two dogs in the snow"
