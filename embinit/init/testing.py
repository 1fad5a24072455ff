"""Tiny pretrained sources of every supported format, written on the fly (for tests and examples).

Like optuna's `optuna/testing`, this lives in the package so every test suite (and a user checking an
install) can build the same small sources without network or large files. Values have four decimals,
so a text round trip is exact: `expected[token]` is what a correct loader must return, as float32.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import torch

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "Paris", "paris", "ran", "a"]


def word_vectors(words=WORDS, dim: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    """word -> float64 vector with 4 decimals (exactly representable as text)."""
    rng = np.random.default_rng(seed)
    return {w: np.round(rng.normal(0.0, 1.0, dim), 4) for w in words}


def _line(word: str, vec: np.ndarray) -> str:
    return word + " " + " ".join(f"{v:.4f}" for v in vec) + "\n"


def write_text(path: str | Path, vectors: dict[str, np.ndarray], header: bool = False) -> Path:
    """GloVe text (no header), or word2vec/fastText text with `header`; gzip when the name ends .gz."""
    path = Path(path)
    dim = len(next(iter(vectors.values())))
    text = (f"{len(vectors)} {dim}\n" if header else "") + "".join(_line(w, v) for w, v in vectors.items())
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_word2vec_bin(path: str | Path, vectors: dict[str, np.ndarray]) -> Path:
    """word2vec binary; gzip when the name ends .gz (as GoogleNews-vectors-negative300.bin.gz)."""
    path = Path(path)
    dim = len(next(iter(vectors.values())))
    with (gzip.open if path.suffix == ".gz" else open)(path, "wb") as f:
        f.write(f"{len(vectors)} {dim}\n".encode())
        for w, v in vectors.items():
            f.write(w.encode("utf-8") + b" " + np.asarray(v, dtype="<f4").tobytes() + b"\n")
    return path


def write_npy(path: str | Path, vectors: dict[str, np.ndarray]) -> Path:
    """`X.npy` plus `X.vocab.txt` (the convention of `embinit.init.vectors`)."""
    path = Path(path)
    np.save(path, np.stack(list(vectors.values())).astype(np.float32))
    path.with_suffix(".vocab.txt").write_text("".join(w + "\n" for w in vectors), encoding="utf-8")
    return path


BERT_PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "on", "mat",
               "run", "##s", "##ning", "play", "##ed", "a"]


def write_tiny_bert(folder: str | Path, pieces=BERT_PIECES, dim: int = 8, seed: int = 0) -> Path:
    """A 1-layer BertModel with a WordPiece tokenizer over `pieces`, saved with save_pretrained."""
    from transformers import BertConfig, BertModel, BertTokenizerFast
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = BertTokenizerFast(vocab={p: i for i, p in enumerate(pieces)}, do_lower_case=True)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(pieces), hidden_size=dim, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=16, max_position_embeddings=16)
    BertModel(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def bert_rows(folder: str | Path) -> tuple[dict[str, int], torch.Tensor]:
    """(piece -> id, embedding weight) of a saved model, read independently of embinit's loader."""
    from safetensors.torch import load_file
    weights = load_file(str(Path(folder) / "model.safetensors"))
    key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    data = json.loads((Path(folder) / "tokenizer.json").read_text(encoding="utf-8"))
    return dict(data["model"]["vocab"]), weights[key]


T5_PIECES = ["<pad>", "</s>", "<unk>", "▁the", "▁cat", "▁dog", "▁s", "at", "▁", "s", "▁run", "ning", "▁a"]


def write_tiny_t5(folder: str | Path, pieces=T5_PIECES, dim: int = 8, seed: int = 0) -> Path:
    """A 1-layer T5Model with a SentencePiece-style (Unigram, `▁` word prefix) tokenizer over `pieces`:
    no cls/bos token, eos `</s>`, like T5 and mT5."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, T5Config, T5Model
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    core = Tokenizer(models.Unigram([(p, -float(len(p) == 1) - 1.0) for p in pieces], unk_id=2))
    core.pre_tokenizer = pre_tokenizers.Metaspace()
    core.decoder = decoders.Metaspace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=len(pieces), d_model=dim, d_kv=4, d_ff=16, num_layers=1, num_heads=2,
                   decoder_start_token_id=0)
    T5Model(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
