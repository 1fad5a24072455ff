"""`focus`: a FOCUS-style OOV rule (Dobler & de Melo, EMNLP 2023, "FOCUS: Effective Embedding
Initialization for Monolingual Specialization of Multilingual Models").

Each row the pretrained source lacks becomes a similarity-weighted mix of the rows it has:
1. auxiliary vectors: a small fastText model (gensim, skip-gram with character n-grams) trained on the
   task's own training text (`build_table(corpus=...)`; the trainer passes the side's training split);
2. for a missing token with an auxiliary vector, the cosine similarity to every *found* token's
   auxiliary vector, turned into weights by sparsemax (as FOCUS does: a sparse convex combination, in
   practice a handful of the most similar known words);
3. the row is that weighted sum of the found rows in the transformed space (after `standardize`,
   `rescale`, ...), so it lies in the convex hull of the known rows at their scale.
Missing tokens without an auxiliary vector (absent from the training text: the specials) are drawn
from N(mean, std) of the found rows per dimension, FOCUS's fallback for its "very rare" tokens.

Seeded and cached like the other rules: the fastText seed is drawn from the build's generator (a trial's
`emb:<side>` stream), fastText runs single-threaded (gensim is then deterministic for a seed), and the
auxiliary vectors of the vocabulary are cached on disk (`<cache root>/focus/`, plain `.npz`, no pickle)
keyed by the training text, the vocabulary fingerprint, the fastText settings and that seed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from embinit.cache_root import cache_root
from embinit.content_hash import entry_lock
from embinit.errors import EmbinitError

FASTTEXT = {"vector_size": 64, "window": 5, "min_count": 1, "sg": 1, "epochs": 10, "min_n": 3, "max_n": 6}
FORMAT_VERSION = 1
CHUNK = 128   # missing rows per similarity block: 128 x n float64 (50 MB at a 50k vocabulary), and its sort


def sparsemax(z: torch.Tensor) -> torch.Tensor:
    """Sparsemax over the last dimension (Martins & Astudillo 2016): the Euclidean projection onto the
    simplex; weights are >= 0, sum to 1, and most are exactly 0."""
    zs, _ = z.sort(dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    cumsum = zs.cumsum(-1) - 1
    k_z = (zs - cumsum / k > 0).sum(-1, keepdim=True)
    tau = cumsum.gather(-1, k_z - 1) / k_z.to(z.dtype)
    return (z - tau).clamp(min=0)


def _train_fasttext(sentences: list[list[str]], seed: int) -> "object":
    try:
        from gensim.models import FastText
    except ImportError as e:  # an optional dependency: `pip install embinit[focus]`
        raise EmbinitError("oov rule 'focus' needs gensim (pip install 'gensim>=4.3')") from e
    return FastText(sentences=sentences, seed=seed, workers=1, **FASTTEXT).wv


def _cache_path(root, tokens: Sequence[str], sentences: list[list[str]], seed: int) -> Path:
    h = hashlib.sha256()
    h.update(json.dumps({"fasttext": FASTTEXT, "seed": seed, "format": FORMAT_VERSION,
                         "vocab": list(tokens)}).encode())
    for s in sentences:
        h.update(("\x1f".join(s) + "\x1e").encode())
    return Path(root).expanduser() / "focus" / f"{h.hexdigest()[:32]}.npz"


def _load(path: Path | None):
    if path is None or not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            return f["vectors"], f["known"]
    except Exception:  # an unreadable entry is rebuilt
        return None


def _save(path: Path | None, vectors: np.ndarray, known: np.ndarray) -> None:
    if path is None:
        return
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(tmp, vectors=vectors, known=known)
        os.replace(tmp, path)
    except BaseException as e:   # stopped mid-write too (a stopped warm-up's SystemExit, Ctrl-C): no half entry
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not isinstance(e, OSError):
            raise
        # an OSError: a read-only cache location only costs speed


def auxiliary_vectors(tokens: Sequence[str], sentences: list[list[str]], seed: int,
                      cache_dir=None) -> tuple[np.ndarray, np.ndarray]:
    """(vectors [len(tokens), dim] float32, known [len(tokens)] bool): fastText vectors of the
    vocabulary, trained on `sentences`; `known` marks tokens that occur in the training text."""
    path = None if cache_dir is False or cache_dir == "" else _cache_path(cache_root(cache_dir or None),
                                                                          tokens, sentences, seed)
    hit = _load(path)
    if hit is not None:
        return hit
    with entry_lock(path):
        hit = _load(path)
        if hit is not None:
            return hit
        wv = _train_fasttext(sentences, seed)
        known = np.array([t in wv.key_to_index for t in tokens], dtype=bool)
        vectors = np.stack([wv[t] if k else np.zeros(wv.vector_size, np.float32)
                            for t, k in zip(tokens, known)]).astype(np.float32)
        _save(path, vectors, known)
    return vectors, known


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp(min=1e-12)


def mix_rows(aux_missing: torch.Tensor, aux_found: torch.Tensor, found_rows: torch.Tensor) -> torch.Tensor:
    """The FOCUS rows: sparsemax(cosine(aux_missing, aux_found)) @ found_rows, in blocks of CHUNK."""
    a, b = _unit(aux_missing.double()), _unit(aux_found.double())
    return torch.cat([sparsemax(a[i:i + CHUNK] @ b.T) @ found_rows for i in range(0, len(a), CHUNK)]
                     or [found_rows.new_zeros(0, found_rows.shape[1])])


def focus_rows(ctx) -> torch.Tensor:
    """The OOV rule (`embinit.init.oov.OOVContext` -> float64 [n_missing, D]); see the module docstring."""
    if ctx.corpus is None or ctx.tokens is None:
        raise EmbinitError("oov rule 'focus' needs the task's training text to train its auxiliary "
                           "fastText vectors: build_table(..., corpus=[[token, ...], ...]) (the trainer "
                           "passes each side's training split)")
    seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=ctx.generator))
    vectors, known = auxiliary_vectors(ctx.tokens, ctx.corpus, seed, ctx.cache_dir)
    vectors, known = torch.from_numpy(vectors), torch.from_numpy(known)
    found = ctx.found[known[ctx.found]]                  # found tokens with an auxiliary vector
    rows_of = {int(i): r for r, i in enumerate(ctx.found.tolist())}
    found_rows = ctx.found_rows[[rows_of[int(i)] for i in found]] if len(found) else None
    mean, std = ctx.found_rows.mean(0), ctx.found_rows.std(0) if len(ctx.found_rows) > 1 else None
    out = torch.empty(len(ctx.missing), ctx.dim, dtype=torch.float64)
    fallback = torch.randn(len(ctx.missing), ctx.dim, generator=ctx.generator, dtype=torch.float64)
    out[:] = mean + fallback * (std if std is not None else 0.0)
    mixed = known[ctx.missing]
    if found_rows is not None and mixed.any():
        out[mixed] = mix_rows(vectors[ctx.missing[mixed]], vectors[found], found_rows)
    return out
