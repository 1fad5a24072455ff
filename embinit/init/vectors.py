"""Word-vector file loaders: GloVe / word2vec / fastText text, word2vec binary (both optionally .gz), .npy.

Each loader streams the file and keeps only the rows the vocabulary needs. Text files: the word is
split off each line and the floats are parsed only for needed words, so a 400k-line file costs one pass
of byte scanning. Every line's field count is still checked (a cheap `count(b" ")`), so an inconsistent
dimension anywhere before the last needed word is reported with its line number. So is a word that is
not UTF-8 (a Latin-1 file would otherwise turn every non-ASCII word into an OOV token): only the rare
non-ASCII words are decoded, so an ASCII line costs one `isascii()`. Reading stops early once every
token has its exact row. A word given twice keeps its first row; the later ones are not read (reading
stops at the first exact row), so they are not reported either.

`.npy` convention: the matrix `X.npy` is [V, D]; its vocabulary (one token per line, line i = row i) is
the first file that exists of `X.vocab.txt`, `X.vocab`, `vocab.txt` in the same folder.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import numpy as np
import torch

from embinit.errors import EmbinitError
from embinit.init.aligned import Aligned, wanted_keys
from embinit.init.source_files import (check_file, check_utf8, count_header, first_line, is_word2vec_binary,
                                       load_npy_matrix, open_binary, read_npy_vocab)


def _parse_row(parts: list[bytes], path: Path, lineno: int) -> list[float]:
    try:
        return [float(x) for x in parts]
    except ValueError:
        bad = next(x for x in parts if not _is_float(x))
        raise EmbinitError(f"{path}:{lineno}: value {bad.decode('utf-8', 'replace')!r} is not a number") from None


def _is_float(x: bytes) -> bool:
    try:
        float(x)
        return True
    except ValueError:
        return False


def _split_line(line: bytes, dim: int, path: Path, lineno: int) -> tuple[bytes, list[bytes]]:
    """(word, D value fields). Words may contain spaces (GloVe 840B has some): the vector is the
    last D fields."""
    parts = line.rstrip(b"\r\n").rstrip().split(b" ")
    if len(parts) < dim + 1 or not parts[0]:
        parts = line.split()
    if len(parts) < dim + 1 or (len(parts) > dim + 1 and _is_float(parts[1])):
        raise EmbinitError(f"{path}:{lineno}: expected a word and {dim} values (the file's D), found "
                           f"{len(parts) - 1} values after {parts[0].decode('utf-8', 'replace')!r}")
    return b" ".join(parts[:-dim]), parts[-dim:]


class _Collector:
    """Keeps the best (lowest-priority) row per vocabulary index and knows when all are exact."""

    def __init__(self, wanted: dict, tokens: list[str]):
        self.wanted = wanted
        self.best: dict[int, tuple[int, list[float]]] = {}
        self.pending = {i for hits in wanted.values() for i, pri in hits if pri == 0}
        self.tokens = tokens

    def offer(self, word: bytes, values) -> None:
        for idx, pri in self.wanted.get(word, ()):
            old = self.best.get(idx)
            if old is None or pri < old[0]:   # first occurrence wins among equals
                self.best[idx] = (pri, values)
                if pri == 0:
                    self.pending.discard(idx)

    def result(self, dim: int, source: str) -> Aligned:
        found = sorted(self.best)
        rows = np.asarray([self.best[i][1] for i in found], dtype=np.float32).reshape(len(found), dim)
        bad = np.flatnonzero(~np.isfinite(rows).all(1))
        if len(bad):   # nan/inf parse as floats but would poison every statistic downstream
            raise EmbinitError(f"{source}: the row of {self.tokens[found[bad[0]]]!r} has a non-finite value "
                               f"({len(bad)} such row(s) among the needed ones)")
        return Aligned(torch.from_numpy(rows), torch.tensor(found, dtype=torch.int64), dim, source)


def _text_layout(path: Path) -> tuple[int, bool]:
    """(D, whether the first line is an `N D` header) of a text vector file."""
    first = first_line(path)
    head = count_header(first)
    dim = head[1] if head else len(first.split()) - 1
    if dim < 1:
        raise EmbinitError(f"{path}:1: expected `word v1 ... vD` or an `N D` header, got {first[:80]!r}")
    return dim, bool(head)


def _entries(path: Path, dim: int, head: bool):
    """(line number, word, line) for each non-blank line of a text vector file, in file order: the one
    parse of its lines (`load_text` and `words`). The word is checked to be UTF-8; the values are split
    off by `_values`, only for the lines a caller wants."""
    with open_binary(path) as f:
        try:
            if head:
                f.readline()
            for lineno, line in enumerate(f, 2 if head else 1):
                if line.count(b" ") == dim:   # fast path: a one-word line (the hot loop: keep it lean)
                    word = line[: line.find(b" ")]
                elif not line.strip():
                    continue
                else:
                    word = _split_line(line, dim, path, lineno)[0]
                if not word.isascii():
                    check_utf8(word, path, str(lineno))
                yield lineno, word, line
        except (OSError, EOFError) as e:
            raise EmbinitError(f"cannot read pretrained file {path}: {e}") from None


def _values(line: bytes, dim: int, path: Path, lineno: int) -> list[bytes]:
    """The D value fields of a line `_entries` gave."""
    fields = line.split()[1:]
    if len(fields) != dim:   # a word with spaces, or e.g. a trailing space hiding a missing value
        fields = _split_line(line, dim, path, lineno)[1]
    return fields


def load_text(path: str | Path, tokens: list[str], lowercase: bool = False) -> Aligned:
    """GloVe (no header) or word2vec/fastText text (`N D` header); .gz is decompressed on the fly."""
    path = check_file(path)
    dim, head = _text_layout(path)
    col = _Collector(wanted_keys(tokens, lowercase), tokens)
    wanted = col.wanted
    with closing(_entries(path, dim, head)) as entries:
        for lineno, word, line in entries:
            if word not in wanted:
                continue
            col.offer(word, _parse_row(_values(line, dim, path, lineno), path, lineno))
            if not col.pending:
                break
    return col.result(dim, str(path))


def words(path: str | Path, top: int | None = None) -> list[str]:
    """The words of a text or word2vec binary vector file in file order, each once (a repeated word's row
    is its first, as the loaders take it), the first `top` of them when given: the same parse and errors
    as `load_text` / `load_word2vec_binary`, so loading `words(path)` gives a row for every word."""
    path = check_file(path)
    if is_word2vec_binary(path):
        entries = ((k, word, None) for k, word, _ in _binary_entries(path))
    else:
        dim, head = _text_layout(path)
        entries = _entries(path, dim, head)
    found: dict[bytes, None] = {}
    with closing(entries):
        for _, word, _ in entries:
            if word and word not in found:   # an empty word (a line starting with a space) names no row
                found[word] = None
                if top is not None and len(found) >= top:
                    break
    return [w.decode("utf-8") for w in found]


_CHUNK = 1 << 20   # bytes read at a time from a binary file (a gzipped one streams)


def _binary_header(path: Path) -> tuple[int, int]:
    head = count_header(first_line(path))
    if not head:
        raise EmbinitError(f"{path}:1: a word2vec binary file must start with an `N D` header")
    return head


def _binary_entries(path: Path):
    """(entry number, word, its 4*D value bytes) for each entry of a word2vec binary file (optionally
    .gz), in file order: the one parse of such a file (`load_word2vec_binary` and `words`). The values
    are a view into the read buffer: callers copy the few they keep."""
    n, dim = _binary_header(path)
    width = 4 * dim
    with open_binary(path) as f:
        try:
            f.readline()
            buf, pos = b"", 0
            for k in range(1, n + 1):
                while True:
                    while pos < len(buf) and buf[pos] in b"\n ":
                        pos += 1
                    sp = buf.find(b" ", pos)
                    if sp >= 0 and sp + 1 + width <= len(buf):
                        break
                    chunk = f.read(_CHUNK)
                    if not chunk:
                        raise EmbinitError(f"{path}: truncated at entry {k} of {n} (the header's N)")
                    buf, pos = buf[pos:] + chunk, 0
                word = buf[pos:sp]
                if not word.isascii():
                    check_utf8(word, path, f"entry {k}")
                yield k, word, memoryview(buf)[sp + 1: sp + 1 + width]
                pos = sp + 1 + width
        except (OSError, EOFError) as e:
            raise EmbinitError(f"cannot read pretrained file {path}: {e}") from None


def load_word2vec_binary(path: str | Path, tokens: list[str], lowercase: bool = False) -> Aligned:
    """word2vec binary: `N D\\n` then per word `word<space>` + D little-endian float32 (+ optional \\n);
    .gz is decompressed on the fly (GoogleNews-vectors-negative300.bin.gz)."""
    path = check_file(path)
    dim = _binary_header(path)[1]
    col = _Collector(wanted_keys(tokens, lowercase), tokens)
    with closing(_binary_entries(path)) as entries:
        for _, word, values in entries:
            if word in col.wanted:
                col.offer(word, np.frombuffer(values, dtype="<f4").tolist())
                if not col.pending:
                    break
    return col.result(dim, str(path))


def load_npy(path: str | Path, tokens: list[str], lowercase: bool = False) -> Aligned:
    path = check_file(path)
    arr = load_npy_matrix(path)
    names = read_npy_vocab(path, arr.shape[0])
    col = _Collector(wanted_keys(tokens, lowercase, encode=False), tokens)
    for row, name in enumerate(names):
        if name in col.wanted:
            col.offer(name, row)
    found = sorted(col.best)
    src_rows = [col.best[i][1] for i in found]
    rows = np.asarray(arr[src_rows], dtype=np.float32).reshape(len(found), arr.shape[1])
    if not np.isfinite(rows).all():
        raise EmbinitError(f"{path}: the matrix has non-finite values in the needed rows")
    return Aligned(torch.from_numpy(rows.copy()), torch.tensor(found, dtype=torch.int64),
                   int(arr.shape[1]), str(path))
