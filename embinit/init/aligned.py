"""`Aligned`: the rows of a pretrained source that a vocabulary needs, in the source's own space.

This is what the loaders return and what the on-disk cache stores; transforms and OOV rules start from
it. `piece_rows` holds, for vocabulary tokens the source lacks, the mean of the source rows of the
pieces the source tokenizer splits them into (Hugging Face sources only; used by `subword_mean`).
`duplicates` names the words a word-vector file holds more than once among those whose row the
vocabulary takes (each takes its first row), with where each occurs; `warn_duplicates` says so.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)
SHOWN = 5   # repeated words named in the warning (the count is in the coverage)


@dataclass
class Aligned:
    rows: torch.Tensor            # float32 [n_found, D], source rows in vocabulary order of `found`
    found: torch.Tensor           # int64 [n_found], the vocabulary index of each row (ascending)
    dim: int
    source: str                   # what was read, for messages and reports
    piece_idx: torch.Tensor | None = None   # int64 [k]: vocabulary indices with a subword mean
    piece_rows: torch.Tensor | None = None  # float32 [k, D]
    # word -> where it occurs ("lines 3, 9", "entries 2, 7"), for each repeated word whose (first) row
    # the vocabulary takes; None: a source that cannot repeat a word (a Hugging Face model)
    duplicates: dict[str, str] | None = None

    def to_dict(self) -> dict:
        return {"rows": self.rows, "found": self.found, "dim": self.dim, "source": self.source,
                "piece_idx": self.piece_idx, "piece_rows": self.piece_rows, "duplicates": self.duplicates}

    @classmethod
    def from_dict(cls, d: dict) -> "Aligned":
        return cls(d["rows"], d["found"], int(d["dim"]), d["source"], d.get("piece_idx"),
                   d.get("piece_rows"), d.get("duplicates"))


def warn_duplicates(aligned: Aligned) -> None:
    """A warning (logged and `warnings.warn`) naming the repeated words whose first row the table uses."""
    if not aligned.duplicates:
        return
    shown = ", ".join(f"{w!r} ({where})" for w, where in list(aligned.duplicates.items())[:SHOWN])
    more = f" and {len(aligned.duplicates) - SHOWN} more" if len(aligned.duplicates) > SHOWN else ""
    message = (f"{aligned.source}: {len(aligned.duplicates)} word(s) the vocabulary takes occur more than once "
               f"in the file; each takes its first row: {shown}{more}")
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=2)


def wanted_keys(tokens: list[str], lowercase: bool, aliases: dict[str, str] | None = None,
                encode: bool = True) -> dict:
    """Map each source key to the vocabulary indices that take its row, with a priority: 0 for the
    exact token (or its alias), 1 for the lowercase fallback. Keys are utf-8 bytes when `encode`."""
    aliases = aliases or {}
    wanted: dict = {}
    for i, tok in enumerate(tokens):
        keys = [aliases.get(tok, tok)]
        if lowercase and tok.lower() != keys[0]:
            keys.append(tok.lower())
        for pri, key in enumerate(keys):
            k = key.encode("utf-8") if encode else key
            wanted.setdefault(k, []).append((i, pri))
    return wanted
