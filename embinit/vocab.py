"""A token vocabulary: index <-> token, optional training counts, and a stable fingerprint.

Shared by the init library (which rows to build) and the tasks (which ids to feed). Special tokens come
first, in a fixed order, so their ids are the same in every vocabulary built by embinit.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from embinit.errors import EmbinitError
from embinit.text_files import read_lines

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIALS = (PAD, UNK, BOS, EOS)
# The roles of a Hugging Face tokenizer's special tokens that give each of embinit's specials a source row,
# the first the tokenizer has (embinit.init.hf.special_aliases; the dry run's embinit.cli.oov_notes)
SPECIAL_ROLES = {PAD: ("pad_token",), UNK: ("unk_token",), BOS: ("cls_token", "bos_token"),
                 EOS: ("sep_token", "eos_token")}


class Vocab:
    """An ordered list of unique tokens, with optional occurrence counts from the training data."""

    def __init__(self, tokens: Sequence[str], counts: dict[str, int] | None = None,
                 specials: Sequence[str] = ()):
        self.tokens = list(tokens)
        self.stoi = {t: i for i, t in enumerate(self.tokens)}
        if len(self.stoi) != len(self.tokens):
            dupes = [t for t, c in Counter(self.tokens).items() if c > 1][:5]
            raise EmbinitError(f"vocabulary has duplicate tokens, e.g. {dupes}")
        self.counts = dict(counts or {})
        self.specials = tuple(specials)

    @classmethod
    def build(cls, counter: Counter, min_freq: int = 2, specials: Sequence[str] = SPECIALS,
              max_size: int | None = None) -> "Vocab":
        """Specials first, then tokens with count >= min_freq by descending count (ties: alphabetical)."""
        kept = sorted((t for t, c in counter.items() if c >= min_freq and t not in specials),
                      key=lambda t: (-counter[t], t))
        if max_size is not None:
            kept = kept[: max(0, max_size - len(specials))]
        return cls(list(specials) + kept, {t: counter[t] for t in kept}, specials)

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __getitem__(self, index: int) -> str:
        return self.tokens[index]

    def index(self, token: str, default: int | None = None) -> int:
        if token in self.stoi:
            return self.stoi[token]
        if default is None:
            default = self.stoi.get(UNK)
        if default is None:
            raise KeyError(token)
        return default

    def encode(self, tokens: Iterable[str]) -> list[int]:
        unk = self.stoi.get(UNK, -1)
        return [self.stoi.get(t, unk) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]

    def fingerprint(self) -> str:
        """sha256 of the ordered token list: two vocabularies with the same fingerprint are identical."""
        h = hashlib.sha256()
        for t in self.tokens:
            h.update(t.encode("utf-8"))
            h.update(b"\n")
        return h.hexdigest()

    def save(self, path: str | Path) -> None:
        """One token per line, `token<TAB>count` when the count is known."""
        with open(path, "w", encoding="utf-8") as f:
            for t in self.tokens:
                c = self.counts.get(t)
                f.write(f"{t}\t{c}\n" if c is not None else f"{t}\n")

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        """Read a vocabulary file: one token per line, optionally followed by a tab and its count."""
        path = Path(path)
        if path.is_dir():
            raise EmbinitError(f"vocabulary file {path} is a folder; give the file in it (one token per line, "
                               "optional TAB count)")
        if not path.is_file():
            raise EmbinitError(f"vocabulary file not found: {path}")
        tokens, counts, empty = [], {}, []
        # split on "\n" only, as `save` writes it (a token may hold U+2028 or U+0085); a byte-order mark is
        # no part of a token; a file that is not UTF-8 is named line by line with the fix, not Python's codec
        lines = read_lines(path)
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            token, _, count = line.partition("\t")
            if not token.strip():   # "\t67349" from a `uniq -c` gone wrong: a row for no token
                empty.append(lineno)
                continue
            if count:
                try:
                    counts[token] = int(count)
                except ValueError:
                    raise EmbinitError(f"{path}:{lineno}: count {count!r} is not an integer") from None
            tokens.append(token)
        if empty:
            shown = ", ".join(map(str, empty[:5])) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
            raise EmbinitError(f"{path}: empty token (nothing before the tab) on line{'s' if len(empty) > 1 else ''} "
                               f"{shown}; each line is TOKEN or TOKEN<TAB>COUNT")
        if not tokens:
            raise EmbinitError(f"vocabulary file is empty: {path}")
        specials = tuple(t for t in tokens if t in SPECIALS)
        return cls(tokens, counts, specials)
