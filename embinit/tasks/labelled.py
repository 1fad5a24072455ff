"""A classification task's files: GLUE's TSV, CSV and JSON Lines, each read into [(text[, text_b], label_id)]
by header name or key (`Layout.columns`), every bad row of a file named in one error; and the labels of a
task defined without them (`derive_labels`). JSON Lines rows serve a language-model corpus too
(`jsonl_rows`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from embinit.errors import EmbinitError, problems_error
from embinit.task_types import Layout
from embinit.tasks.raw import label_id
from embinit.text_files import decoded_lines


# Classification files. Each format's row source gives, in line order, `(where, values)` for a row (its
# text column(s), then its label as written) or the problem of a row that has none; `_read` turns labels
# into ids, so every bad row of a file (its shape or its label) is named in one error, in line order.

def _tsv_rows(path: Path, layout: Layout) -> list:
    """GLUE TSV: columns found by header name; fields split on tabs without quote processing (GLUE's MNLI
    text contains unbalanced quotes)."""
    lines, bad = decoded_lines(path)
    if not lines:
        raise EmbinitError(f"{path} is empty; expected a header with columns {list(layout.columns)}")
    header = lines[0].split("\t")
    cols = _columns(path, header, layout)
    label_last = cols[-1] == len(header) - 1
    out = [bad[1]] if 1 in bad else []
    for lineno, line in enumerate(lines[1:], 2):
        if lineno in bad:   # named as it is; the file's other rows are still read
            out.append(bad[lineno])
            continue
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) == len(header):
            out.append((f"{path}:{lineno}", [fields[i] for i in cols]))
        elif label_last and max(cols[:-1]) < len(fields) - 1 < len(header) - 1:
            # GLUE's NLI files: a row may have fewer annotator-label columns (label1..label5) than the
            # header; the gold label is still its last field (as GLUE's own readers take it).
            out.append((f"{path}:{lineno}", [fields[i] for i in cols[:-1]] + [fields[-1]]))
        else:
            out.append(f"{path}:{lineno}: expected {len(header)} tab-separated fields as in the header, "
                       f"got {len(fields)}: {line[:80]!r}")
    return out


def _columns(path: Path, header: list[str], layout: Layout) -> list[int]:
    absent = [c for c in layout.columns if c not in header]
    if absent:
        raise EmbinitError(f"{path}:1: header lacks column(s) {absent}; found {header}")
    return [header.index(c) for c in layout.columns]


def _csv_rows(path: Path, layout: Layout) -> list:
    """CSV with a header row (Python's csv dialect: quoted fields may hold commas, quotes and line breaks);
    columns found by header name; a row is named by the line it starts on."""
    import csv
    import io
    lines, bad = decoded_lines(path)
    reader = csv.reader(io.StringIO("\n".join(lines), newline=""), strict=True)
    try:
        header = next(reader, None)
    except csv.Error as e:
        raise EmbinitError(f"{path}:1: not CSV: {e}") from None
    if not header:
        raise EmbinitError(f"{path} is empty; expected a header with columns {list(layout.columns)}")
    cols = _columns(path, header, layout)
    out = [bad[n] for n in range(1, reader.line_num + 1) if n in bad]
    while True:
        lineno = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            out.append(f"{path}:{lineno}: not CSV: {e}")
            break   # the reader cannot go on past a broken quote
        if spanned := [bad[n] for n in range(lineno, reader.line_num + 1) if n in bad]:
            out.extend(spanned)   # a row on lines that are not UTF-8: those lines named, its other rows read
            continue
        if not any(f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            out.append(f"{path}:{lineno}: expected {len(header)} fields as in the header, got {len(fields)}")
        else:
            out.append((f"{path}:{lineno}", [fields[i] for i in cols]))
    return out


def jsonl_rows(path: Path, layout: Layout, label: bool = True) -> list:
    """JSON Lines, one object per line; values by `layout.columns` keys. A label may be written as a number
    (`1` and `1.0` read as the label "1"); a text must be a string."""
    import json
    out = []
    lines, bad = decoded_lines(path)
    for lineno, line in enumerate(lines, 1):
        if lineno in bad:
            out.append(bad[lineno])
            continue
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            out.append(f"{where}: not JSON: {e.msg} at column {e.colno}")
            continue
        if not isinstance(obj, dict):
            out.append(f"{where}: not a JSON object, but {type(obj).__name__}")
            continue
        values = [obj.get(c) for c in layout.columns]
        if label and isinstance(values[-1], (int, float)) and not isinstance(values[-1], bool):
            number = values[-1]   # 1.0 (a float column written out by pandas) is the label "1"
            values[-1] = str(int(number) if isinstance(number, float) and number.is_integer() else number)
        bad = [c for c, v in zip(layout.columns, values) if not isinstance(v, str)]
        if bad:
            out.append(f"{where}: {bad} {'is' if len(bad) == 1 else 'are'} missing or not text")
        else:
            out.append((where, values))
    return out


ROWS = {"tsv": _tsv_rows, "csv": _csv_rows, "jsonl": jsonl_rows}


MAX_LINES = 5   # line numbers named for a label value the layout lacks, beyond its first row


def _read(rows: list, path: Path, layout: Layout) -> list[tuple]:
    """[(text[, text_b], label_id)] of a row source's rows; every bad row in one error. A label value the
    layout lacks is one problem however many rows hold it (at its first row, with how many more and where),
    and the error ends with the labels the file does hold: labels written otherwise than the definition's
    (`neg` for `negative`) would otherwise fill the error with one line per row."""
    out, problems, unknown, seen = [], [], {}, {}
    for row in rows:
        if isinstance(row, str):
            problems.append(row)
            continue
        where, values = row
        seen.setdefault(values[-1].strip(), None)
        try:
            out.append((*[v.strip() for v in values[:-1]], label_id(values[-1], layout, where)))
        except EmbinitError as e:   # every bad row of the file in one error, not the first alone
            value = values[-1].strip()
            if value in unknown:
                unknown[value][1].append(where.rpartition(":")[2])
                continue
            unknown[value] = (len(problems), [])
            problems.append(str(e))
    for at, lines in unknown.values():
        if lines:
            shown = ", ".join(lines[:MAX_LINES]) + (", ..." if len(lines) > MAX_LINES else "")
            problems[at] += f" (the same on {len(lines)} more line{'s' if len(lines) > 1 else ''}: {shown})"
    if problems:
        hint = f"the labels this file holds: {sorted(seen, key=_label_order)}" if unknown else ""
        raise problems_error(path, problems, hint)
    return out


def read_rows(rows: list, path: Path, layout: Layout) -> list[tuple]:
    """[(text[, text_b], label_id)] of a row source's rows (`_read`), for a reader that filters them."""
    return _read(rows, path, layout)


def read_tsv(path: Path, layout: Layout) -> list[tuple]:
    """GLUE TSV -> [(text[, text_b], label_id)] (see `_tsv_rows`)."""
    return _read(_tsv_rows(path, layout), path, layout)


def read_csv(path: Path, layout: Layout) -> list[tuple]:
    """A CSV file with a header row -> [(text[, text_b], label_id)] (see `_csv_rows`)."""
    return _read(_csv_rows(path, layout), path, layout)


def read_jsonl(path: Path, layout: Layout) -> list[tuple]:
    """JSON Lines -> [(text[, text_b], label_id)] (see `jsonl_rows`)."""
    return _read(jsonl_rows(path, layout), path, layout)


READERS = {"tsv": read_tsv, "csv": read_csv, "jsonl": read_jsonl}


def _label_order(value: str) -> tuple:
    try:
        return 0, int(value), value
    except ValueError:
        return 1, 0, value


def derive_labels(path: Path, layout: Layout) -> Layout:
    """The layout of a classification task defined without `labels`: its train file's (`path`) distinct label values
    (stripped) in id order, sorted as integers where every value is one (0 .. 10, not 0, 1, 10, 2), else
    as text; a dev row with another value is then an unknown label."""
    rows = ROWS[layout.format](path, layout)
    problems = [r for r in rows if isinstance(r, str)]
    if problems:
        raise problems_error(path, problems)
    values = {values[-1].strip() for _, values in rows}
    ints = all(_label_order(v)[0] == 0 for v in values)
    labels = tuple(sorted(values, key=_label_order if ints else str))
    if len(labels) < 2:
        raise EmbinitError(f"{path}: the label column {layout.columns[-1]!r} holds {list(labels)}; a classifier "
                           f"needs 2 labels at least (or give the definition's labels)")
    return dataclasses.replace(layout, labels=labels, label_names=labels)
