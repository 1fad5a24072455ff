"""`Aligned`: the rows of a pretrained source that a vocabulary needs, in the source's own space.

This is what the loaders return and what the on-disk cache stores; transforms and OOV rules start from
it. `piece_rows` holds, for vocabulary tokens the source lacks, the mean of the source rows of the
pieces the source tokenizer splits them into (Hugging Face sources only; used by `subword_mean`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Aligned:
    rows: torch.Tensor            # float32 [n_found, D], source rows in vocabulary order of `found`
    found: torch.Tensor           # int64 [n_found], the vocabulary index of each row (ascending)
    dim: int
    source: str                   # what was read, for messages and reports
    piece_idx: torch.Tensor | None = None   # int64 [k]: vocabulary indices with a subword mean
    piece_rows: torch.Tensor | None = None  # float32 [k, D]

    def to_dict(self) -> dict:
        return {"rows": self.rows, "found": self.found, "dim": self.dim, "source": self.source,
                "piece_idx": self.piece_idx, "piece_rows": self.piece_rows}

    @classmethod
    def from_dict(cls, d: dict) -> "Aligned":
        return cls(d["rows"], d["found"], int(d["dim"]), d["source"], d.get("piece_idx"),
                   d.get("piece_rows"))


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
