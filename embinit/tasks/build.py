"""RawData -> tokenized, numericalized splits and vocabularies (the part of loading worth caching).

Each kind's builder (the kind registry's `build`) takes the raw data, a tokenizer backend per embedding
side ({"src", "tgt"} or {"tok"}), min_freq, max_len and full_vocab, and returns the payload `load_task`
caches."""

from __future__ import annotations

import json
from collections import Counter

from embinit.errors import EmbinitError
from embinit.task_registry import kind_code, kind_entry
from embinit.tasks.raw import RawData
from embinit.tasks.tokenization import TokenizerSpec
from embinit.tasks.tokenizer_backends import Backend, load_backend
from embinit.vocab import EOS, SPECIALS, UNK, Vocab


class _Stats:
    """Per-split counts for `info`: examples, tokens, <unk> tokens, truncated sequences."""

    def __init__(self):
        self.sizes, self.tokens, self.unks, self.truncated = {}, Counter(), Counter(), Counter()

    def encode(self, vocab: Vocab, tokens: list[str], split: str, max_len: int | None) -> list[int]:
        ids = vocab.encode(tokens)
        self.tokens[split] += len(ids)
        self.unks[split] += ids.count(vocab.stoi[UNK])
        if max_len is not None and len(ids) > max_len:
            self.truncated[split] += 1
            ids = ids[:max_len]
        return ids

    def info(self) -> dict:
        return {"sizes": dict(self.sizes), "tokens": dict(self.tokens),
                "unk_rate": {s: round(self.unks[s] / n, 6) if n else 0.0 for s, n in self.tokens.items()},
                "truncated": {s: self.truncated[s] for s in self.sizes}}


def _vocab(counter: Counter, min_freq: int, backend: Backend, full: bool) -> tuple[Vocab, str]:
    """min-freq vocabulary from training counts, or (GPT-2 LM) the tokenizer's whole vocabulary after the
    specials, in the tokenizer's id order, so every GPT-2 token has a row whether or not training saw it."""
    if not full:
        return Vocab.build(counter, min_freq), f"train tokens with count >= {min_freq}"
    own = [t for t in backend.full_vocab() if t not in SPECIALS]
    return Vocab(list(SPECIALS) + own, {t: counter[t] for t in own if t in counter}, SPECIALS), \
        f"the tokenizer's full vocabulary ({len(own)} tokens) + specials"


def build_translation(raw: RawData, tok: dict[str, Backend], min_freq: int, max_len: int, full_vocab: bool) -> dict:
    src, tgt = tok["src"], tok["tgt"]
    tokenized = {s: (src.tokenize_batch([a for a, _ in rows]), tgt.tokenize_batch([b for _, b in rows]))
                 for s, rows in raw.splits.items()}
    src_vocab, rule = _vocab(Counter(t for toks in tokenized["train"][0] for t in toks), min_freq, src, False)
    vocab, _ = _vocab(Counter(t for toks in tokenized["train"][1] for t in toks), min_freq, tgt, False)
    stats, splits = _Stats(), {}
    for split, (src_toks, tgt_toks) in tokenized.items():
        stats.sizes[split] = len(src_toks)
        splits[split] = [(stats.encode(src_vocab, a, f"{split}/src", max_len),
                          stats.encode(vocab, b, split, max_len)) for a, b in zip(src_toks, tgt_toks)]
    # BLEU compares detokenized output with these: raw target text, lowercased when the model can only
    # produce lowercase (otherwise every capitalized reference word would count as an error); with a
    # sub-word tokenizer, the text as that tokenizer writes it back (`Backend.references`).
    references = {s: tgt.references([b for _, b in raw.splits[s]]) for s in raw.eval_splits}
    info = stats.info()
    info["truncated"].update({f"{s}/src": stats.truncated[f"{s}/src"] for s in stats.sizes})
    return {"splits": splits, "vocab": vocab, "src_vocab": src_vocab, "references": references,
            "num_labels": None, "info": {**info, "vocab_rule": rule, "references_lowercased": tgt.lowercases,
                     "references": "round_trip" if tgt.round_trips else "raw"}}


def build_classification(raw: RawData, tok: dict[str, Backend], min_freq: int, max_len: int,
                         full_vocab: bool) -> dict:
    tok = tok["tok"]
    tokenized = {}
    for split, rows in raw.splits.items():
        columns = [tok.tokenize_batch([row[c] for row in rows]) for c in range(len(rows[0]) - 1)] \
            if rows else []
        tokenized[split] = (columns, [row[-1] for row in rows])
    vocab, rule = _vocab(Counter(t for col in tokenized["train"][0] for toks in col for t in toks),
                         min_freq, tok, False)
    stats, splits = _Stats(), {}
    for split, (columns, labels) in tokenized.items():
        stats.sizes[split] = len(labels)
        encoded = [[stats.encode(vocab, toks, split, max_len) for toks in col] for col in columns]
        splits[split] = [(*ids, label) for *ids, label in zip(*encoded, labels)]
    # label ids index the classifier's outputs: without names, as many as the largest id of any split needs
    # (a label seen only in dev, or ids with a gap, would otherwise fall outside them)
    ids = [r[-1] for rows in raw.splits.values() for r in rows]
    labels = raw.label_names or list(range(max(ids) + 1 if ids else 0))
    return {"splits": splits, "vocab": vocab, "src_vocab": None, "references": {},
            "num_labels": len(labels), "info": {**stats.info(), "vocab_rule": rule,
                                                "label_names": list(map(str, labels))}}


def build_lm(raw: RawData, tok: dict[str, Backend], min_freq: int, max_len: int, full_vocab: bool) -> dict:
    """One stream per split: each line's tokens then <eos>, blank lines too (WikiText's convention, as in
    PyTorch's word_language_model). Not truncated."""
    tok = tok["tok"]
    tokenized = {s: tok.tokenize_batch(lines) for s, lines in raw.splits.items()}
    vocab, rule = _vocab(Counter(t for toks in tokenized["train"] for t in toks), min_freq, tok, full_vocab)
    stats, splits, eos = _Stats(), {}, vocab.stoi[EOS]
    for split, lines in tokenized.items():
        stats.sizes[split] = len(lines)
        stream: list[int] = []
        for toks in lines:
            stream.extend(stats.encode(vocab, toks, split, None))
            stream.append(eos)
        splits[split] = stream
    return {"splits": splits, "vocab": vocab, "src_vocab": None, "references": {}, "num_labels": None,
            "info": {**stats.info(), "vocab_rule": rule,
                     "stream_tokens": {s: len(v) for s, v in splits.items()}}}


def build(raw: RawData, src_spec: TokenizerSpec | None, tgt_spec: TokenizerSpec, min_freq: int,
          max_train_examples: int | None, max_len: int, full_vocab: bool) -> dict:
    """Tokenize, build vocabularies, numericalize. `max_train_examples` keeps the first N training
    examples (lines for LM), before the vocabulary is counted: the vocabulary is what the model sees."""
    empty = [s for s, rows in raw.splits.items() if not rows]
    if empty:
        raise EmbinitError(f"{raw.loaded_from}: split(s) {empty} have no examples")
    available = len(raw.splits["train"])
    if max_train_examples is not None:
        raw.splits["train"] = raw.splits["train"][:max_train_examples]
    backends: dict[str, Backend] = {}

    def load(spec: TokenizerSpec) -> Backend:  # one backend per identity (HF loads are slow)
        key = json.dumps(spec.identity, default=str)
        if key not in backends:
            backends[key] = load_backend(spec)
        return backends[key]

    sides = kind_entry(raw.kind).sides
    tgt = load(tgt_spec)
    tokenizers = {side: tgt if side == sides[-1] else load(src_spec) for side in sides}
    out = kind_code(raw.kind, "build")(raw, tokenizers, min_freq, max_len, full_vocab)
    out["eval_splits"] = list(raw.eval_splits)
    # info["lowercase"]: whether the text the model sees is lowercased (the effective value, detected for
    # sub-word tokenizers); BLEU reads it to compare case-insensitively.
    out["info"].update(train_examples_available=available, lowercase=tgt.lowercases,
                       loaded_from=raw.loaded_from, vocab_size=len(out["vocab"]),
                       src_vocab_size=len(out["src_vocab"]) if out["src_vocab"] else None, **raw.extra_info)
    return out
