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


def read_tsv(path: Path, layout: Layout) -> list[tuple]:
    """GLUE TSV -> [(text[, text_b], label_id)]. Columns are found by header name; fields are split on
    tabs without quote processing (GLUE's MNLI text contains unbalanced quotes)."""
    lines = read_lines(path)
    if not lines:
        raise EmbinitError(f"{path} is empty; expected a header with columns {list(layout.columns)}")
    header = lines[0].split("\t")
    absent = [c for c in layout.columns if c not in header]
    if absent:
        raise EmbinitError(f"{path}:1: header lacks column(s) {absent}; found {header}")
    cols = [header.index(c) for c in layout.columns]
    label_last = cols[-1] == len(header) - 1
    rows, problems = [], []
    for lineno, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) == len(header):
            values = [fields[i] for i in cols]
        elif label_last and max(cols[:-1]) < len(fields) - 1 < len(header) - 1:
            # GLUE's NLI files: a row may have fewer annotator-label columns (label1..label5) than the
            # header; the gold label is still its last field (as GLUE's own readers take it).
            values = [fields[i] for i in cols[:-1]] + [fields[-1]]
        else:
            problems.append(f"{path}:{lineno}: expected {len(header)} tab-separated fields as in the header, "
                            f"got {len(fields)}: {line[:80]!r}")
            continue
        texts = [v.strip() for v in values[:-1]]
        try:
            rows.append((*texts, label_id(values[-1], layout, f"{path}:{lineno}")))
        except EmbinitError as e:   # every bad row of the file in one error, not the first alone
            problems.append(str(e))
    if problems:
        raise problems_error(path, problems)
    return rows


def _labelled(values: list, layout: Layout, where: str, problems: list[str], rows: list[tuple]) -> None:
    """One row's texts and label, or its problem: a missing or non-text value, an unknown label."""
    if any(not isinstance(v, str) for v in values):
        names = [c for c, v in zip(layout.columns, values) if not isinstance(v, str)]
        problems.append(f"{where}: {names} {'is' if len(names) == 1 else 'are'} missing or not text")
        return
    try:
        rows.append((*[v.strip() for v in values[:-1]], label_id(values[-1], layout, where)))
    except EmbinitError as e:
        problems.append(str(e))


def read_csv(path: Path, layout: Layout) -> list[tuple]:
    """A CSV file with a header row (Python's csv dialect: quoted fields may hold commas, quotes and line
    breaks) -> [(text[, text_b], label_id)]; columns found by header name. Rows are named by the line they
    start on."""
    import csv
    import io
    text = "\n".join(read_lines(path))
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
    except csv.Error as e:
        raise EmbinitError(f"{path}:1: not CSV: {e}") from None
    if not header:
        raise EmbinitError(f"{path} is empty; expected a header with columns {list(layout.columns)}")
    absent = [c for c in layout.columns if c not in header]
    if absent:
        raise EmbinitError(f"{path}:1: header lacks column(s) {absent}; found {header}")
    cols = [header.index(c) for c in layout.columns]
    rows, problems = [], []
    while True:
        lineno = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            problems.append(f"{path}:{lineno}: not CSV: {e}")
            break   # the reader cannot go on past a broken quote
        if not any(f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            problems.append(f"{path}:{lineno}: expected {len(header)} fields as in the header, got {len(fields)}")
            continue
        _labelled([fields[i] for i in cols], layout, f"{path}:{lineno}", problems, rows)
    if problems:
        raise problems_error(path, problems)
    return rows


def read_jsonl(path: Path, layout: Layout) -> list[tuple]:
    """JSON Lines, one object per line -> [(text[, text_b], label_id)]; values by `layout.columns` keys. A
    label may be written as a number (`1` reads as the label "1")."""
    import json
    rows, problems = [], []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{where}: not JSON: {e.msg} at column {e.colno}")
            continue
        if not isinstance(obj, dict):
            problems.append(f"{where}: not a JSON object, but {type(obj).__name__}")
            continue
        label = obj.get(layout.columns[-1])
        if isinstance(label, (int, float)) and not isinstance(label, bool):
            label = str(label)
        _labelled([obj.get(c) for c in layout.columns[:-1]] + [label], layout, where, problems, rows)
    if problems:
        raise problems_error(path, problems)
    return rows


READERS = {"tsv": read_tsv, "csv": read_csv, "jsonl": read_jsonl}


def read_local(task: str, layout: Layout, folder: Path, splits: dict[str, str]) -> RawData:
    """Read the splits (TaskData name -> source name) of `task` from `folder`."""
    files = find_files(task, layout, folder, splits)
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
    return RawData(layout.kind, out, evals, str(folder.resolve()), list(layout.label_names) or None,
                   {"files": {s: [p.name for p in ps] for s, ps in files.items()}})


# One split's files -> its rows, per kind (the kind registry's `read_split`).

def read_pairs(paths: list[Path], layout: Layout) -> list[tuple[str, str]]:
    """(src, tgt) file pairs; IWSLT's release test set has six."""
    return [example for src, tgt in zip(paths[::2], paths[1::2]) for example in read_parallel(src, tgt)]


def read_labelled(paths: list[Path], layout: Layout) -> list[tuple]:
    return READERS[layout.format](paths[0], layout)


def read_stream(paths: list[Path], layout: Layout) -> list[str]:
    return [line.strip() for line in read_lines(paths[0])]


def file_identity(task: str, layout: Layout, folder: Path, splits: dict[str, str], cache_dir=None) -> list:
    """What the cache key needs to know about the files: the name and content digest of each (not the
    path or mtime, so an entry made on one node is valid on another with the same files)."""
    from embinit.content_hash import file_digest
    ids = []
    for split, paths in sorted(find_files(task, layout, folder, splits).items()):
        for p in paths:
            ids.append([split, p.name, file_digest(p, cache_dir)])
    return ids
