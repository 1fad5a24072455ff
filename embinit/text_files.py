"""The lines of a UTF-8 text file a user gives (a task's data files, a vocabulary file, a spec), every line
that is not UTF-8 named with the fix (re-encode it), not Python's codec message. Lines are split on "\\n"
only (never on U+2028, U+0085 or a lone "\\r", which `str.splitlines` would treat as line breaks and so
silently misalign parallel files). A file whose name ends in .gz is gunzipped as it is read (Multi30k's
repository ships its raw files as `train.de.gz`, ...). Below `tasks`, `vocab` and `spec`: it imports
`embinit.errors` only."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from embinit.errors import EmbinitError, problems_error


def _utf8_problems(path: Path, data: bytes) -> dict[int, str]:
    """{line number: `path:line: not UTF-8 ...`} for each line of `data` that does not decode."""
    problems = {}
    for lineno, line in enumerate(data.split(b"\n"), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            problems[lineno] = (f"{path}:{lineno}: not UTF-8: byte 0x{line[e.start]:02x} at column {e.start + 1} "
                                f"in '{line[:80].decode('utf-8', 'backslashreplace')}'")
    return problems


UTF8_HINT = "re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"


def utf8_error(path: Path, data: bytes) -> EmbinitError:
    """The error for `data`, the bytes of `path`, that is not UTF-8: each line that is not (the first
    MAX_LISTED), then the hint to re-encode it."""
    return problems_error(path, list(_utf8_problems(path, data).values()), UTF8_HINT)


def decoded_lines(path: Path) -> tuple[list[str], dict[int, str]]:
    """The lines of a text file as `read_lines` gives them, and {line number: `path:line: not UTF-8 ...`}
    for each line that is not UTF-8, kept with its bad bytes written as \\xNN: a reader of rows names
    every other problem of the file beside those lines. The first one carries the hint to re-encode (on
    the last, it was cut from a Latin-1 file's error, which names only the first MAX_LISTED problems)."""
    zipped = path.name.endswith(".gz")
    try:
        with (gzip.open(path, "rt", encoding="utf-8-sig", newline="\n") if zipped
              else open(path, encoding="utf-8-sig", newline="\n")) as f:
            return [line.rstrip("\r\n") for line in f], {}
    except UnicodeDecodeError:
        data = _content(path)
    except (OSError, EOFError, zlib.error) as e:   # gzip: BadGzipFile (an OSError), a cut-off file's EOFError
        raise EmbinitError(f"cannot read {path}: {e}"
                           + ("; a .gz file must be gzip-compressed and whole (gunzip -t tests it)" if zipped
                              else "")) from None
    bad = _utf8_problems(path, data)
    bad[min(bad)] += f"; {UTF8_HINT}"
    text = data.decode("utf-8-sig", "backslashreplace")
    lines = text.split("\n")
    if text.endswith("\n"):   # as a file's lines end: no empty line after the last line break
        lines.pop()
    return [line.rstrip("\r") for line in lines], bad


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (a byte-order mark is skipped), without line ends ("\r\n" too). A file
    that is not UTF-8 is an error naming each line that is not (re-encode it, e.g. iconv -f latin1)."""
    lines, bad = decoded_lines(path)
    if bad:
        raise utf8_error(path, _content(path))
    return lines


def _content(path: Path) -> bytes:
    """The bytes the file's lines are made of: a .gz file's gunzipped (its compressed bytes have no lines)."""
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def require_utf8(path: Path) -> None:
    """Refuse a text file a library reads itself (a tokenizer's vocab.txt, whose reader's message is its
    codec's, `stream did not contain valid UTF-8`, naming no file) when it is not UTF-8: `utf8_error`."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise EmbinitError(f"cannot read {path}: {e.strerror}") from None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise utf8_error(path, data) from None
