"""The paper's transformers in plain PyTorch: encoder-decoder (translation), encoder-only classifier,
decoder-only language model.

    model = build_model("translation", {"src": src_table, "tgt": tgt_table}, ModelConfig(d_model=300),
                        generator=g)
    set_trainable(model, train_embeddings=True, freeze_non_embeddings=False)
    set_dropout_generator(model, torch.Generator().manual_seed(0))

Embedding tables are used as given (the init library made them); every other weight matrix is
Xavier-uniform from `generator`, biases zero, LayerNorms (1, 0).
"""

from __future__ import annotations

import torch
from torch import nn

from embinit.errors import EmbinitError
from embinit.task_registry import KINDS, kind_code
from embinit.model_dims import divisors
from embinit.models.embedding import ModelConfig, TokenEmbedding, padding_mask
from embinit.models.encoder import DecoderLM, EncoderClassifier
from embinit.models.layers import FastDropout, xavier_init_
from embinit.models.seq2seq import EncoderDecoder

__all__ = ["ModelConfig", "EncoderDecoder", "EncoderClassifier", "DecoderLM", "build_model",
           "set_trainable", "set_dropout_generator", "embedding_parameters", "divisors",
           "padding_mask", "TokenEmbedding", "FastDropout"]

def build_model(kind: str, tables: dict[str, torch.Tensor], cfg: ModelConfig, num_labels: int = 0,
                generator: torch.Generator | None = None, pad_id: int = 0) -> nn.Module:
    """A model of `kind` with the given embedding tables ("src"/"tgt" or "tok"): the kind's registered
    model class (embinit.task_registry), built by its `from_tables`."""
    if kind not in KINDS:
        raise EmbinitError(f"{kind!r} is not a model kind; choose from {sorted(KINDS)}")
    sides = KINDS[kind].sides
    missing = [k for k in sides if k not in tables]
    if missing:
        raise EmbinitError(f"a {kind} model needs embedding tables {list(sides)}; missing {missing}")
    for name, t in tables.items():
        if t.dim() != 2 or t.shape[1] != cfg.d_model:
            raise EmbinitError(f"the {name!r} embedding table has dimension {t.shape[-1]} but the model's "
                               f"d_model is {cfg.d_model}")
    model = kind_code(kind, "model").from_tables(tables, cfg, num_labels, pad_id)
    xavier_init_(model, generator)
    return model


def embedding_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [m.embedding.weight for m in model.modules() if isinstance(m, TokenEmbedding)]


def set_trainable(model: nn.Module, train_embeddings: bool = True,
                  freeze_non_embeddings: bool = False) -> None:
    """The ablation switches: frozen embeddings (Table 3) and embeddings-only training (the KNN
    experiment). Both at once would train nothing, which is an error."""
    if not train_embeddings and freeze_non_embeddings:
        raise EmbinitError("train_embeddings=False with freeze_non_embeddings=True leaves nothing to train")
    emb = {id(p) for p in embedding_parameters(model)}
    for p in model.parameters():
        p.requires_grad_(train_embeddings if id(p) in emb else not freeze_non_embeddings)


def set_dropout_generator(model: nn.Module, generator: torch.Generator | None) -> None:
    """Every dropout mask of `model` will come from `generator` (one seed fixes them all)."""
    for m in model.modules():
        if isinstance(m, FastDropout):
            m.generator = generator
