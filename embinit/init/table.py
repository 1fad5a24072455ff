"""`build_table`: one embedding table for a vocabulary from an init spec.

Order of operations for a pretrained source (the issue's contract):
1. load the source rows the vocabulary has (`Aligned`; cached on disk);
2. mean_p and sigma_p come from those found rows (reported as `source_stats`);
3. the spec's transforms apply to the found rows, in order;
4. the rows the source lacks are filled by the OOV rule, computed from the *transformed* rows, so a
   table never mixes two scales by accident (except by choice: the default `xavier` rule with a raw,
   untransformed source reproduces the paper, whose missing rows keep Xavier values).
`match` replaces every row, so the OOV rule does not apply to it.

The PE table (`pe`, an `embinit.stats.PETable`: positions and base) is what a transform that targets a
statistic of the encodings reads (`rescale=absorption:R`; the registry entry's `takes_pe`): pass the one
the table's absorption will be measured against (a trial's `pe_positions` and `pe_base`,
`embinit.train.prepare`); the default is `embedding_stats`' default table. Other transforms never see it.

Randomness: everything draws from one generator in a fixed order (transform, then OOV rule); the same
spec, vocabulary and seed give the identical tensor. No generator and no seed means seed 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from embinit.content_hash import entry_lock
from embinit.errors import EmbinitError, unknown_name
from embinit.init import hf, table_cache, vectors
from embinit.init.aligned import Aligned, warn_duplicates
from embinit.init.oov import OOV_RULES, OOVContext
from embinit.init.random import INITS
from embinit.init.registry import DEFAULT_OOV, TRANSFORM_INFO, InitSpec, oov_applies, parse_init_spec
from embinit.init.source_files import npy_vocab_path, resolve_source
from embinit.init.transforms import TRANSFORMS
from embinit.stats import DEFAULT_PE, PETable
from embinit.vocab import Vocab

LOADERS = {"text": vectors.load_text, "word2vec_bin": vectors.load_word2vec_binary,
           "npy": vectors.load_npy, "hf": hf.load_hf}


@dataclass
class BuildResult:
    table: torch.Tensor                     # float32 [len(vocab), D]
    label: str                              # the paper's name, e.g. GloVe_Xavier
    dim: int
    coverage: dict[str, Any] | None = None  # rows_found, rows_total, row_share, token_share
    source_stats: dict[str, float] | None = None  # mean_p, std_p of the found rows (source space)
    spec: InitSpec | None = None
    oov: str | None = None
    source: str | None = None               # the file / model actually read
    info: dict[str, Any] = field(default_factory=dict)
    oov_rows: torch.Tensor | None = None    # int64 vocabulary indices the OOV rule filled (None: no rule ran)


def _as_vocab(vocab: "Vocab | Sequence[str]") -> Vocab:
    return vocab if isinstance(vocab, Vocab) else Vocab(list(vocab))


def _as_sentences(corpus: Sequence[Sequence] | None, vocab: Vocab) -> list[list[str]] | None:
    """Training text as token lists; vocabulary ids are mapped to their tokens."""
    if corpus is None:
        return None
    return [[vocab.tokens[t] if isinstance(t, int) else str(t) for t in s] for s in corpus]


def _generator(generator: torch.Generator | None, seed: int | None) -> torch.Generator:
    if generator is not None:
        return generator
    return torch.Generator().manual_seed(0 if seed is None else int(seed))


def _identity(kind: str, location: str, cache_dir=None) -> dict:
    if kind == "hf":
        return hf.identity(location, cache_dir)
    ident = table_cache.file_identity(location, cache_dir)
    if kind == "npy":   # the rows' names live in a second file
        ident["vocab"] = table_cache.file_identity(npy_vocab_path(Path(location).expanduser()), cache_dir)
    return ident


def load_aligned(kind: str, location: str, vocab: Vocab, lowercase: bool,
                 cache_dir: "str | Path | None | bool" = None) -> tuple[Aligned, bool]:
    """The aligned source rows, from the cache when present. Returns (aligned, was_cached).
    cache_dir: None -> default location; False or "" -> no cache."""
    path = None
    if cache_dir is not False and cache_dir != "":
        root = cache_dir or table_cache.default_cache_dir()
        key = {"kind": kind, "source": _identity(kind, location, root), "vocab": vocab.fingerprint(),
               "lowercase": lowercase}
        path = table_cache.entry_path(root, key)
        hit = table_cache.load_entry(path)
        if hit is not None:
            return hit, True
    with entry_lock(path):   # concurrent trials: the first reads the source, the others wait and hit
        hit = table_cache.load_entry(path) if path is not None else None
        if hit is not None:
            return hit, True
        aligned = LOADERS[kind](location, vocab.tokens, lowercase)
        if path is not None:
            table_cache.save_entry(path, aligned)
    return aligned, False


# where an empty overlap may be a matter of case: what can change it (a spec cannot set lowercase lookup per
# init: embinit.spec.init_checks)
_LOWERCASE_HINT = ("; if it is a matter of case: `embinit embeddings stats --lowercase` looks up token.lower(), and a "
                   "trial's word-level vocabulary is lowercased unless its task sets `extras: {lowercase: false}`")


def _coverage(vocab: Vocab, aligned: Aligned) -> dict[str, Any]:
    found = aligned.found
    n_found, n = int(found.numel()), len(vocab)
    cov: dict[str, Any] = {"rows_found": n_found, "rows_total": n, "row_share": n_found / n}
    if aligned.duplicates is not None:   # words of a vector file that occur more than once (first row used)
        cov["duplicate_words"] = len(aligned.duplicates)
    if vocab.counts:
        total = sum(vocab.counts.values())
        hit = sum(vocab.counts.get(vocab.tokens[i], 0) for i in found.tolist())
        cov["token_share"] = hit / total if total else None
    return cov


def apply_transform(token: str, rows: torch.Tensor, n: int, dim: int, g: torch.Generator,
                    pe: PETable = DEFAULT_PE):
    """One transform token (`NAME` or `NAME=ARG`, see the registry) applied to float64 rows -> Fitted.
    `pe` goes to the transforms whose entry `takes_pe`, as the keyword `pe`; the others never see it."""
    name, _, arg = token.partition("=")
    kw = {"pe": pe} if TRANSFORM_INFO[name].takes_pe else {}
    return TRANSFORMS[name](rows, n, dim, g, arg, **kw) if arg else TRANSFORMS[name](rows, n, dim, g, **kw)


def _random_table(spec: InitSpec, n: int, dim: int, g: torch.Generator, pe: PETable) -> torch.Tensor:
    """A random init's draw, then its transforms (only `any_source` ones parse) over the whole table."""
    table = INITS[spec.source](n, dim, g)
    if not spec.transforms:
        return table
    rows = table.double()
    for token in spec.transforms:
        rows = apply_transform(token, rows, n, dim, g, pe).rows
    return rows.float()


def _fill(spec: InitSpec, aligned: Aligned, n: int, rule: str, g: torch.Generator,
          text: dict[str, Any], pe: PETable) -> torch.Tensor:
    """Steps 2-4 of the module docstring, in float64; returns the float32 table. `text`: the OOV
    context's vocabulary, training text and cache location (`OOVContext` fields)."""
    rows, found, vmap = aligned.rows.double(), aligned.found, (lambda v: v)
    for name in spec.transforms:
        fitted = apply_transform(name, rows, n, aligned.dim, g, pe)
        rows = fitted.rows
        if fitted.covers_all:
            found, vmap = torch.arange(n), None
        else:
            vmap = (lambda f, h: (lambda v: h(f(v))))(vmap, fitted.vector_map) if vmap else None
    table = torch.empty(n, aligned.dim, dtype=torch.float64)
    table[found] = rows
    mask = torch.ones(n, dtype=torch.bool)
    mask[found] = False
    missing = mask.nonzero().flatten()
    if len(missing):
        piece = None
        if aligned.piece_idx is not None:
            mapped = vmap(aligned.piece_rows.double()) if vmap else aligned.piece_rows.double()
            piece = dict(zip(aligned.piece_idx.tolist(), mapped))
        ctx = OOVContext(missing, rows, n, aligned.dim, g, aligned.source, piece, found, **text)
        table[missing] = OOV_RULES[rule](ctx)
    return table.float()


def build_table(spec, vocab, dim: int | None = None, generator: torch.Generator | None = None,
                seed: int | None = None, pretrained: str | None = None, oov: str | None = None,
                cache_dir: "str | Path | None | bool" = None, corpus: Sequence[Sequence] | None = None,
                pe: PETable = DEFAULT_PE) -> BuildResult:
    """Build the N x D float32 table for `vocab` (a Vocab or a list of tokens) by `spec`. `corpus`: the
    training text (sequences of tokens or vocabulary ids), which the `focus` OOV rule learns from. `pe`:
    the PE table the table's absorption is measured against (see the module docstring)."""
    spec = parse_init_spec(spec)
    vocab = _as_vocab(vocab)
    g = _generator(generator, seed)
    rule = oov or spec.oov or DEFAULT_OOV
    if rule not in OOV_RULES:
        raise unknown_name("oov rule", rule, OOV_RULES)
    if not spec.is_pretrained:
        if not dim or dim < 1:
            raise EmbinitError(f"init {spec.source!r} needs a positive dimension (dim/--dim), got {dim!r}")
        return BuildResult(_random_table(spec, len(vocab), int(dim), g, pe), spec.label, int(dim), spec=spec)
    filled = rule if oov_applies(spec) else None   # `match` replaces every row: no rule runs
    kind, location = resolve_source(spec, pretrained)
    if filled == "subword_mean" and kind != "hf":
        raise EmbinitError(f"oov rule 'subword_mean' needs a source with a tokenizer (bert, mbert, t5, mt5, "
                           f"hf); {location} is a word-vector file without one")
    aligned, cached = load_aligned(kind, location, vocab, spec.lowercase, cache_dir)
    warn_duplicates(aligned)   # on every build: a cached entry keeps them
    if dim and dim != aligned.dim:
        raise EmbinitError(f"dimension mismatch: {location} has D={aligned.dim} but dim={dim} was requested")
    if aligned.found.numel() == 0:
        looked_up = [t for t in vocab.tokens if t not in vocab.specials][:3]   # what was not found, e.g.
        raise EmbinitError(f"empty overlap: none of the {len(vocab)} vocabulary tokens is in {location} "
                           f"(looked up e.g. {', '.join(map(repr, looked_up))})"
                           f"{'' if spec.lowercase else _LOWERCASE_HINT}")
    rows = aligned.rows.double()
    stats = {"mean_p": rows.mean().item(), "std_p": rows.std().item() if rows.numel() > 1 else 0.0}
    text = {"tokens": vocab.tokens, "corpus": _as_sentences(corpus, vocab), "cache_dir": cache_dir}
    table = _fill(spec, aligned, len(vocab), rule, g, text, pe)
    missing = torch.ones(len(vocab), dtype=torch.bool)
    missing[aligned.found] = False
    return BuildResult(table, spec.label, aligned.dim, _coverage(vocab, aligned), stats, spec,
                       filled, location, {"cached": cached, "kind": kind},
                       missing.nonzero().flatten() if filled else None)
