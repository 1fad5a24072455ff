"""Reading a task from a local folder in its dataset's usual raw form (its `Layout` in embinit.task_registry).

Lines are split on "\\n" only (never on U+2028, U+0085 or a lone "\\r", which `str.splitlines` would
treat as line breaks and so silently misalign parallel files).
"""

from __future__ import annotations

from pathlib import Path

from embinit.errors import EmbinitError, problems_error
from embinit.task_registry import kind_entry, load
from embinit.task_types import Layout
from embinit.tasks import iwslt
from embinit.tasks.raw import RawData, label_id


def _pick(folder: Path, candidates: tuple[str, ...], suffixes: tuple[str, ...]) -> list[Path] | None:
    """The first candidate name for which every `<name><suffix>` exists, else None."""
    for name in candidates:
        paths = [folder / f"{name}{s}" for s in suffixes]
        if all(p.is_file() for p in paths):
            return paths
    return None


def _missing_names(folder: Path, candidates: tuple[str, ...], suffixes: tuple[str, ...]) -> str:
    """What a split lacks: the missing files of the first candidate name with some of its files present
    (`val.en` when val.de is there), else each candidate's whole set (`val.de and val.en or valid.de and
    valid.en`)."""
    for name in candidates:
        paths = [folder / f"{name}{s}" for s in suffixes]
        if any(p.is_file() for p in paths):
            return " and ".join(p.name for p in paths if not p.is_file())
    return " or ".join(" and ".join(f"{name}{s}" for s in suffixes) for name in candidates)


def find_files(task: str, layout: Layout, folder: Path, splits: dict[str, str]) -> dict[str, list[Path]]:
    """{TaskData split: [paths]} for the source splits `splits` needs; a missing file is an error naming
    every missing file and the folder."""
    kind = kind_entry(layout.kind)
    suffixes = (f".{layout.src_lang}", f".{layout.tgt_lang}") if kind.two_sided else ("",)
    if layout.release and iwslt.is_release(folder) and not _pick(folder, ("train",), suffixes):
        return iwslt.release_files(folder, splits, (layout.src_lang, layout.tgt_lang))
    found, missing = {}, []
    for split, source in splits.items():
        paths = _pick(folder, layout.files[source], suffixes)
        if paths is None:
            missing.append(_missing_names(folder, layout.files[source], suffixes))
        else:
            found[split] = paths
    if missing:
        hint = ""
        if kind.stream and "train" in splits and splits["train"] == "train":
            hint = " (without a train file, pass train_split='valid', eval_split='test')"
        raise EmbinitError(f"{task}: data folder {folder} lacks {'; '.join(missing)}{hint}")
    return found


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


def _trailing_blanks_dropped(lines: list[str]) -> list[str]:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def read_parallel(src_path: Path, tgt_path: Path) -> list[tuple[str, str]]:
    """Line-aligned (src, tgt) pairs. Blank lines at a file's end are no pairs; a line blank on both
    sides is skipped; a line blank on one side only (a sign of misalignment, and an empty target or
    source to train and score on) is an error naming each such line."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    unit = "lines"
    if iwslt.is_release_file(src_path):
        src, tgt, unit = iwslt.read_release_file(src), iwslt.read_release_file(tgt), "sentences"
    src, tgt = _trailing_blanks_dropped(src), _trailing_blanks_dropped(tgt)
    if len(src) != len(tgt):
        raise EmbinitError(f"misaligned parallel files: {src_path} has {len(src)} {unit} but {tgt_path} "
                           f"has {len(tgt)} (not counting blank lines at the end)")
    pairs, problems = [], []
    for lineno, (s, t) in enumerate(zip(src, tgt), 1):
        s, t = s.strip(), t.strip()
        if bool(s) != bool(t):
            blank, other = (src_path, tgt_path) if t else (tgt_path, src_path)
            problems.append(f"{blank}:{lineno}: blank, but line {lineno} of {other.name} is not")
        elif s:
            pairs.append((s, t))
    if problems:
        raise problems_error(src_path.parent, problems)
    return pairs


# Classification files. Each format's row source gives, in line order, `(where, values)` for a row (its
# text column(s), then its label as written) or the problem of a row that has none; `_read` turns labels
# into ids, so every bad row of a file (its shape or its label) is named in one error, in line order.

def _tsv_rows(path: Path, layout: Layout) -> list:
    """GLUE TSV: columns found by header name; fields split on tabs without quote processing (GLUE's MNLI
    text contains unbalanced quotes)."""
    lines = read_lines(path)
    if not lines:
        raise EmbinitError(f"{path} is empty; expected a header with columns {list(layout.columns)}")
    header = lines[0].split("\t")
    cols = _columns(path, header, layout)
    label_last = cols[-1] == len(header) - 1
    out = []
    for lineno, line in enumerate(lines[1:], 2):
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
    reader = csv.reader(io.StringIO("\n".join(read_lines(path)), newline=""), strict=True)
    try:
        header = next(reader, None)
    except csv.Error as e:
        raise EmbinitError(f"{path}:1: not CSV: {e}") from None
    if not header:
        raise EmbinitError(f"{path} is empty; expected a header with columns {list(layout.columns)}")
    cols = _columns(path, header, layout)
    out = []
    while True:
        lineno = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            out.append(f"{path}:{lineno}: not CSV: {e}")
            break   # the reader cannot go on past a broken quote
        if not any(f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            out.append(f"{path}:{lineno}: expected {len(header)} fields as in the header, got {len(fields)}")
        else:
            out.append((f"{path}:{lineno}", [fields[i] for i in cols]))
    return out


def _jsonl_rows(path: Path, layout: Layout, label: bool = True) -> list:
    """JSON Lines, one object per line; values by `layout.columns` keys. A label may be written as a number
    (`1` reads as the label "1"); a text must be a string."""
    import json
    out = []
    for lineno, line in enumerate(read_lines(path), 1):
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
            values[-1] = str(values[-1])
        bad = [c for c, v in zip(layout.columns, values) if not isinstance(v, str)]
        if bad:
            out.append(f"{where}: {bad} {'is' if len(bad) == 1 else 'are'} missing or not text")
        else:
            out.append((where, values))
    return out


ROWS = {"tsv": _tsv_rows, "csv": _csv_rows, "jsonl": _jsonl_rows}


def _read(rows: list, path: Path, layout: Layout) -> list[tuple]:
    """[(text[, text_b], label_id)] of a row source's rows; every bad row in one error."""
    out, problems = [], []
    for row in rows:
        if isinstance(row, str):
            problems.append(row)
            continue
        where, values = row
        try:
            out.append((*[v.strip() for v in values[:-1]], label_id(values[-1], layout, where)))
        except EmbinitError as e:   # every bad row of the file in one error, not the first alone
            problems.append(str(e))
    if problems:
        raise problems_error(path, problems)
    return out


def read_tsv(path: Path, layout: Layout) -> list[tuple]:
    """GLUE TSV -> [(text[, text_b], label_id)] (see `_tsv_rows`)."""
    return _read(_tsv_rows(path, layout), path, layout)


def read_csv(path: Path, layout: Layout) -> list[tuple]:
    """A CSV file with a header row -> [(text[, text_b], label_id)] (see `_csv_rows`)."""
    return _read(_csv_rows(path, layout), path, layout)


def read_jsonl(path: Path, layout: Layout) -> list[tuple]:
    """JSON Lines -> [(text[, text_b], label_id)] (see `_jsonl_rows`)."""
    return _read(_jsonl_rows(path, layout), path, layout)


READERS = {"tsv": read_tsv, "csv": read_csv, "jsonl": read_jsonl}


def _label_order(value: str) -> tuple:
    try:
        return 0, int(value), value
    except ValueError:
        return 1, 0, value


def derive_labels(task: str, layout: Layout, folder: Path) -> Layout:
    """The layout of a classification task defined without `labels`: its train file's distinct label values
    (stripped) in id order, sorted as integers where every value is one (0 .. 10, not 0, 1, 10, 2), else
    as text; a dev row with another value is then an unknown label."""
    import dataclasses
    [path] = find_files(task, layout, folder, {"train": "train"})["train"]
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


def read_local(task: str, layout: Layout, folder: Path, splits: dict[str, str]) -> RawData:
    """Read the splits (TaskData name -> source name) of `task` from `folder`."""
    files = find_files(task, layout, folder, splits)
    derived = layout.kind == "classification" and not layout.labels
    if derived:
        layout = derive_labels(task, layout, folder)
    read = load(kind_entry(layout.kind).read_split)
    out, problems = {}, []
    for split, paths in files.items():   # every file's problems at once, not the first file's alone
        try:
            out[split] = read(paths, layout)
        except EmbinitError as e:
            problems.append(str(e))
    if problems:
        raise EmbinitError(" | ".join(problems))
    evals = [s for s in layout.eval_splits if s in out]
    info = {"files": {s: [p.name for p in ps] for s, ps in files.items()}}
    if derived:
        info["labels_from"] = f"{layout.files['train'][0]} (its label values, sorted)"
    return RawData(layout.kind, out, evals, str(folder.resolve()), list(layout.label_names) or None, info)


# One split's files -> its rows, per kind (the kind registry's `read_split`).

def read_pairs(paths: list[Path], layout: Layout) -> list[tuple[str, str]]:
    """(src, tgt) file pairs; IWSLT's release test set has six."""
    return [example for src, tgt in zip(paths[::2], paths[1::2]) for example in read_parallel(src, tgt)]


def read_labelled(paths: list[Path], layout: Layout) -> list[tuple]:
    return READERS[layout.format](paths[0], layout)


def read_stream(paths: list[Path], layout: Layout) -> list[str]:
    """A text file's lines; a JSONL corpus's (a task defined so) text values, each split into its lines, so
    the stream is the one the same text as a file gives."""
    if layout.format != "jsonl":
        return [line.strip() for line in read_lines(paths[0])]
    rows = _jsonl_rows(paths[0], layout, label=False)
    problems = [r for r in rows if isinstance(r, str)]
    if problems:
        raise problems_error(paths[0], problems)
    return [line.strip() for _, (text,) in rows for line in text.split("\n")]


def file_identity(task: str, layout: Layout, folder: Path, splits: dict[str, str], cache_dir=None) -> list:
    """What the cache key needs to know about the files: the name and content digest of each (not the
    path or mtime, so an entry made on one node is valid on another with the same files)."""
    from embinit.content_hash import file_digest
    ids = []
    for split, paths in sorted(find_files(task, layout, folder, splits).items()):
        for p in paths:
            ids.append([split, p.name, file_digest(p, cache_dir)])
    return ids
