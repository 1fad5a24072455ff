"""The lines of a task's UTF-8 text files, every line that is not UTF-8 named. Lines are split on "\\n" only
(never on U+2028, U+0085 or a lone "\\r", which `str.splitlines` would treat as line breaks and so
silently misalign parallel files)."""

from __future__ import annotations

from pathlib import Path

from embinit.errors import EmbinitError, problems_error


def _utf8_problems(path: Path, data: bytes) -> list[str]:
    """`path:line: not UTF-8 ...` for each line of `data` that does not decode."""
    problems = []
    for lineno, line in enumerate(data.split(b"\n"), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            problems.append(f"{path}:{lineno}: not UTF-8: byte 0x{line[e.start]:02x} at column {e.start + 1} in "
                            f"'{line[:80].decode('utf-8', 'backslashreplace')}'")
    return problems


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (a byte-order mark is skipped), without line ends ("\r\n" too). A file
    that is not UTF-8 is an error naming each line that is not (re-encode it, e.g. iconv -f latin1)."""
    try:
        with open(path, encoding="utf-8-sig", newline="\n") as f:
            return [line.rstrip("\r\n") for line in f]
    except UnicodeDecodeError:
        problems = _utf8_problems(path, path.read_bytes())
        raise problems_error(path, [*problems[:-1], problems[-1] + "; re-encode the file as UTF-8 (e.g. "
                                                                  "iconv -f latin1 -t utf-8)"]) from None
    except OSError as e:
        raise EmbinitError(f"cannot read {path}: {e}") from None
