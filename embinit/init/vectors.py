"""Word-vector file loaders: GloVe / word2vec / fastText text, word2vec binary (both optionally .gz), .npy.

Each loader streams the whole file and keeps only the rows the vocabulary needs. Text files: the word is
split off each line and the floats are parsed only for needed words, so a 400k-line file costs one pass
of byte scanning. Every line's field count is still checked (a cheap `count(b" ")`), and so is every
word's UTF-8 (a Latin-1 file would otherwise turn every non-ASCII word into an OOV token; only the rare
non-ASCII words are decoded, so an ASCII line costs one `isascii()`). A file's problems are collected and
raised as one error naming each `path:line: what` (`errors.problems_error`): a line with the wrong number
of values, a word that is not UTF-8, a needed row with a value that is not a number or is nan/inf (the
values of unneeded rows are not parsed), and a word2vec/fastText header `N D` whose N is not the number
of rows (fewer: usually a truncated download, whose missing rows would silently become OOV rows). A
word2vec binary file is checked the same way, by entry.

A word given more than once keeps its first row (as gensim's reader does); the repeated words whose row
the vocabulary takes are recorded (`Aligned.duplicates`), counted in the table's coverage
(`duplicate_words`) and named in a warning. `stop_when_found` (the analyses' `--top`, a prefix read by
request) stops reading once every token has its exact row: the rest of the file is then not checked.

`.npy` convention: the matrix `X.npy` is [V, D]; its vocabulary (one token per line, line i = row i) is
the first file that exists of `X.vocab.txt`, `X.vocab`, `vocab.txt` in the same folder.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import numpy as np
import torch

from embinit.errors import EmbinitError, problems_error
from embinit.init.aligned import Aligned, wanted_keys
from embinit.init.source_files import (UTF8_HINT, check_file, count_header, first_line, is_word2vec_binary,
                                       load_npy_matrix, not_utf8, npy_vocab_path, open_binary,
                                       read_npy_vocab, text_layout)

SHOWN_PLACES = 3   # positions of a repeated word named in `Aligned.duplicates`


class _Problems:
    """The problems of one file, each at its position (a line, an entry; 0 for the file as a whole),
    raised together in file order."""

    def __init__(self, path: Path, unit: str = ""):
        self.path, self.unit, self.items, self.hint = path, unit, [], False

    def where(self, pos: int) -> str:
        return f"{self.path}:{self.unit}{pos}"

    def add(self, pos: int, message: str) -> None:
        self.items.append((pos, message))

    def utf8(self, word: bytes, pos: int) -> bool:
        """Whether `word` is UTF-8; a problem when not."""
        problem = not_utf8(word, self.path, f"{self.unit}{pos}")
        if problem:
            self.add(pos, problem)
            self.hint = True
        return problem is None

    def raise_any(self) -> None:
        if self.items:
            found = [m for _, m in sorted(self.items, key=lambda item: item[0])]
            raise problems_error(self.path, found, UTF8_HINT if self.hint else "")


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
        found = len(parts) - 1
        raise EmbinitError(f"{path}:{lineno}: expected a word and {dim} value{'s' if dim != 1 else ''} (the "
                           f"file's D), found {found} value{'s' if found != 1 else ''} after "
                           f"{parts[0][:80].decode('utf-8', 'replace')!r}")
    return b" ".join(parts[:-dim]), parts[-dim:]


class _Collector:
    """Keeps the best (lowest-priority) row per vocabulary index, knows when all are exact, and where
    each wanted word occurs (a repeated word keeps its first row)."""

    def __init__(self, wanted: dict):
        self.wanted = wanted
        self.best: dict[int, tuple[int, object, int, bytes]] = {}   # index -> (priority, row, position, word)
        self.pending = {i for hits in wanted.values() for i, pri in hits if pri == 0}
        self.first: dict = {}      # word offered -> its position (its row is the one kept)
        self.repeated: dict = {}   # word offered again -> every position where it occurs

    def repeat(self, word, pos: int) -> None:
        """`word`, offered at `self.first[word]`, occurs again at `pos` (its first row stands)."""
        self.repeated.setdefault(word, [self.first[word]]).append(pos)

    def offer(self, word, values, pos: int) -> None:
        self.first[word] = pos
        for idx, pri in self.wanted.get(word, ()):
            old = self.best.get(idx)
            if old is None or pri < old[0]:
                self.best[idx] = (pri, values, pos, word)
                if pri == 0:
                    self.pending.discard(idx)

    def duplicates(self, unit: str) -> dict[str, str]:
        """{word: where it occurs, e.g. "lines 3, 9"} for each repeated word whose row some vocabulary
        index takes, in file order."""
        out = {}
        for w, places in sorted(self.repeated.items(), key=lambda item: item[1][0]):
            if any(idx in self.best and self.best[idx][3] == w for idx, _ in self.wanted[w]):
                more = f", ... ({len(places)} times)" if len(places) > SHOWN_PLACES else ""
                out[w.decode("utf-8") if isinstance(w, bytes) else w] = \
                    f"{unit} {', '.join(map(str, places[:SHOWN_PLACES]))}{more}"
        return out

    def result(self, dim: int, problems: _Problems, unit: str) -> Aligned:
        """The rows found, or one error for every problem of the file (a needed row's nan/inf included:
        they parse as floats but would poison every statistic downstream)."""
        found = sorted(self.best)
        rows = np.asarray([self.best[i][1] for i in found], dtype=np.float32).reshape(len(found), dim)
        bad = {self.best[found[i]][2]: self.best[found[i]][3] for i in np.flatnonzero(~np.isfinite(rows).all(1))}
        for pos, word in bad.items():
            problems.add(pos, f"{problems.where(pos)}: the row of {word.decode('utf-8')!r} has a non-finite "
                              "value (nan or inf)")
        problems.raise_any()
        return Aligned(torch.from_numpy(rows), torch.tensor(found, dtype=torch.int64), dim, str(problems.path),
                       duplicates=self.duplicates(unit))


def _entries(path: Path, dim: int, n: int | None, problems: _Problems):
    """(line number, word, line) for each non-blank line of a text vector file, in file order: the one
    parse of its lines (`load_text` and `words`). A line without a word and D values, or whose word is not
    UTF-8, is a problem and skipped; at the end of the file, a header's N that differs from the number of
    rows (the non-blank lines, skipped ones included) is one. The values are split off by `_values`, only
    for the lines a caller wants."""
    lineno, blank = 0 if n is None else 1, 0
    with open_binary(path) as f:
        try:
            if n is not None:
                f.readline()
            for lineno, line in enumerate(f, 1 if n is None else 2):
                if line.count(b" ") == dim:   # fast path: a one-word line (the hot loop: keep it lean)
                    word = line[: line.find(b" ")]
                elif not line.strip():
                    blank += 1
                    continue
                else:
                    try:
                        word = _split_line(line, dim, path, lineno)[0]
                    except EmbinitError as e:
                        problems.add(lineno, str(e))
                        continue
                if word.isascii() or problems.utf8(word, lineno):
                    yield lineno, word, line
        except (OSError, EOFError) as e:
            raise EmbinitError(f"cannot read pretrained file {path}: {e}") from None
    rows = lineno - (n is not None) - blank
    if n is not None and rows != n:
        problems.add(1, f"{path}:1: the header says {n} rows but the file has {rows}"
                        + (" (a truncated download? the missing rows would become OOV rows)" if rows < n else ""))


def _values(line: bytes, dim: int, path: Path, lineno: int) -> list[bytes]:
    """The D value fields of a line `_entries` gave."""
    fields = line.split()[1:]
    if len(fields) != dim:   # a word with spaces, or e.g. a trailing space hiding a missing value
        fields = _split_line(line, dim, path, lineno)[1]
    return fields


def load_text(path: str | Path, tokens: list[str], lowercase: bool = False, *,
              stop_when_found: bool = False) -> Aligned:
    """GloVe (no header) or word2vec/fastText text (`N D` header); .gz is decompressed on the fly."""
    path = check_file(path)
    dim, n = text_layout(path)
    problems = _Problems(path)
    col = _Collector(wanted_keys(tokens, lowercase))
    wanted = col.wanted
    with closing(_entries(path, dim, n, problems)) as entries:
        for lineno, word, line in entries:
            if word not in wanted:
                continue
            if word in col.first:
                col.repeat(word, lineno)
                continue
            try:
                col.offer(word, _parse_row(_values(line, dim, path, lineno), path, lineno), lineno)
            except EmbinitError as e:
                problems.add(lineno, str(e))
            if stop_when_found and not col.pending:
                break
    return col.result(dim, problems, "lines")


def _file_entries(path: Path):
    """(entries, problems): the one parse of a text or word2vec binary vector file (`_entries`,
    `_binary_entries`) as (position, word, _) triples, and the problems it collects."""
    if is_word2vec_binary(path):
        problems = _Problems(path, "entry ")
        return ((k, word, None) for k, word, _ in _binary_entries(path, problems)), problems
    problems = _Problems(path)
    dim, n = text_layout(path)
    return _entries(path, dim, n, problems), problems


def read_through(path: str | Path) -> None:
    """Read a text or word2vec binary vector file through, raising the error `words(path)` would raise
    (every problem of the file), holding none of its words: the spec's check (embinit.spec.vector_files),
    which needs the problems alone. Its memory does not grow with the file (a 2M-word GloVe file's words
    alone are a few hundred MB; docs/benchmarks.md)."""
    path = check_file(path)
    entries, problems = _file_entries(path)
    with closing(entries):
        for _ in entries:
            pass
    problems.raise_any()


def words(path: str | Path, top: int | None = None) -> list[str]:
    """The words of a text or word2vec binary vector file in file order, each once (a repeated word's row
    is its first, as the loaders take it), the first `top` of them when given: the same parse and errors
    as `load_text` / `load_word2vec_binary`, so loading `words(path)` gives a row for every word. Every
    word is held: to check a file only, `read_through`."""
    path = check_file(path)
    entries, problems = _file_entries(path)
    found: dict[bytes, None] = {}
    with closing(entries):
        for _, word, _ in entries:
            if word and word not in found:   # an empty word (a line starting with a space) names no row
                found[word] = None
                if top is not None and len(found) >= top:
                    break
    problems.raise_any()
    return [w.decode("utf-8") for w in found]


_CHUNK = 1 << 20   # bytes read at a time from a binary file (a gzipped one streams)


def _binary_header(path: Path) -> tuple[int, int]:
    head = count_header(first_line(path))
    if not head:
        raise EmbinitError(f"{path}:1: a word2vec binary file must start with an `N D` header")
    return head


def _binary_entries(path: Path, problems: _Problems):
    """(entry number, word, its 4*D value bytes) for each entry of a word2vec binary file (optionally
    .gz), in file order: the one parse of such a file (`load_word2vec_binary` and `words`). The values
    are a view into the read buffer: callers copy the few they keep. A word that is not UTF-8 is a
    problem and skipped; at the end of the file, a number of entries other than the header's N, or an
    incomplete last entry, is one."""
    n, dim = _binary_header(path)
    width, k = 4 * dim, 0
    with open_binary(path) as f:
        try:
            f.readline()
            buf, pos = b"", 0
            while True:
                while pos < len(buf) and buf[pos] in b"\n ":
                    pos += 1
                sp = buf.find(b" ", pos)
                end = sp + 1 + width
                if sp < 0 or end > len(buf):   # the entry is not all in the buffer: read on
                    chunk = f.read(_CHUNK)
                    if not chunk:   # the end of the file
                        break
                    buf, pos = buf[pos:] + chunk, 0
                    continue
                k += 1
                word = buf[pos:sp]
                if word.isascii() or problems.utf8(word, k):
                    yield k, word, memoryview(buf)[sp + 1: end]
                pos = end
        except (OSError, EOFError) as e:
            raise EmbinitError(f"cannot read pretrained file {path}: {e}") from None
    part = f" and {len(buf) - pos} bytes of an incomplete one" if pos < len(buf) else ""
    if k != n or part:
        problems.add(0, f"{path}: {'truncated: ' if k < n else ''}the header says {n} entries but the file has "
                        f"{k}{part}" + (" (a truncated download? the missing rows would become OOV rows)"
                                        if k < n else ""))


def load_word2vec_binary(path: str | Path, tokens: list[str], lowercase: bool = False, *,
                         stop_when_found: bool = False) -> Aligned:
    """word2vec binary: `N D\\n` then per word `word<space>` + D little-endian float32 (+ optional \\n);
    .gz is decompressed on the fly (GoogleNews-vectors-negative300.bin.gz)."""
    path = check_file(path)
    dim = _binary_header(path)[1]
    problems = _Problems(path, "entry ")
    col = _Collector(wanted_keys(tokens, lowercase))
    with closing(_binary_entries(path, problems)) as entries:
        for k, word, values in entries:
            if word not in col.wanted:
                continue
            if word in col.first:
                col.repeat(word, k)
                continue
            col.offer(word, np.frombuffer(values, dtype="<f4").tolist(), k)
            if stop_when_found and not col.pending:
                break
    return col.result(dim, problems, "entries")


def load_npy(path: str | Path, tokens: list[str], lowercase: bool = False) -> Aligned:
    path = check_file(path)
    arr = load_npy_matrix(path)
    names = read_npy_vocab(path, arr.shape[0])
    col = _Collector(wanted_keys(tokens, lowercase, encode=False))
    for row, name in enumerate(names):
        if name in col.first:   # only wanted names are offered
            col.repeat(name, row + 1)
        elif name in col.wanted:
            col.offer(name, row, row + 1)
    found = sorted(col.best)
    src_rows = [col.best[i][1] for i in found]
    rows = np.asarray(arr[src_rows], dtype=np.float32).reshape(len(found), arr.shape[1])
    if not np.isfinite(rows).all():
        raise EmbinitError(f"{path}: the matrix has non-finite values in the needed rows")
    return Aligned(torch.from_numpy(rows.copy()), torch.tensor(found, dtype=torch.int64), int(arr.shape[1]),
                   str(path), duplicates=col.duplicates(f"{npy_vocab_path(path).name} lines"))
