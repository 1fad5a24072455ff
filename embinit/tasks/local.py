"""Reading a task from a local folder in its dataset's usual raw form (its `Layout` in embinit.task_registry).

Lines are split on "\\n" only (never on U+2028, U+0085 or a lone "\\r", which `str.splitlines` would
treat as line breaks and so silently misalign parallel files).
"""

from __future__ import annotations

from pathlib import Path

from embinit.errors import EmbinitError, problems_error
from embinit.task_registry import kind_entry, load
from embinit.task_types import Layout
from embinit.tasks import exports, iwslt, multinli
from embinit.tasks.labelled import READERS, derive_labels, jsonl_rows
from embinit.tasks.raw import MissingFiles, RawData
from embinit.text_files import decoded_lines, read_lines


def _file(folder: Path, name: str) -> Path:
    """`folder/name`, or its gzipped copy `name.gz` where only that exists (read as it is: text_files)."""
    path = folder / name
    zipped = folder / f"{name}.gz"
    return zipped if not path.is_file() and zipped.is_file() else path


def _pick(folder: Path, candidates: tuple[str, ...], suffixes: tuple[str, ...]) -> list[Path] | None:
    """The first candidate name for which every `<name><suffix>` (or `<name><suffix>.gz`) exists, else
    None."""
    for name in candidates:
        paths = [_file(folder, f"{name}{s}") for s in suffixes]
        if all(p.is_file() for p in paths):
            return paths
    return None


def _missing_names(folder: Path, candidates: tuple[str, ...], suffixes: tuple[str, ...]) -> str:
    """What a split lacks: the missing files of the first candidate name with some of its files present
    (`val.en` when val.de is there), else each candidate's whole set (`val.de and val.en or valid.de and
    valid.en`)."""
    for name in candidates:
        paths = [_file(folder, f"{name}{s}") for s in suffixes]
        if any(p.is_file() for p in paths):
            return " and ".join(p.name for p in paths if not p.is_file())
    return " or ".join(" and ".join(f"{name}{s}" for s in suffixes) for name in candidates)


def _export(task: str, layout: Layout, folder: Path) -> str | None:
    """How `folder` holds the task's hub dataset as `datasets` exports it (tasks.exports), where it lacks the
    task's raw train file(s); else None."""
    suffixes = (f".{layout.src_lang}", f".{layout.tgt_lang}") if kind_entry(layout.kind).two_sided else ("",)
    if _pick(folder, layout.files["train"], suffixes):
        return None
    return exports.kind(task, folder)


def find_files(task: str, layout: Layout, folder: Path, splits: dict[str, str]) -> dict[str, list[Path]]:
    """{TaskData split: [paths]} for the source splits `splits` needs; a missing file is an error naming
    every missing file and the folder."""
    kind = kind_entry(layout.kind)
    suffixes = (f".{layout.src_lang}", f".{layout.tgt_lang}") if kind.two_sided else ("",)
    if (how := _export(task, layout, folder)) is not None:
        return exports.files(task, folder, how, splits)
    if layout.release and not _pick(folder, layout.files["train"], suffixes):   # a release folder, not GLUE's
        if kind.two_sided and iwslt.is_release(folder):                         # or the aligned line files
            return iwslt.release_files(folder, splits, (layout.src_lang, layout.tgt_lang))
        if not kind.two_sided and multinli.is_release(folder):
            return multinli.release_files(folder, splits)
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
            hint = (" (without a train file, pass train_split='valid', eval_split='test' as extras: a spec's "
                    "`extras: {train_split: valid, eval_split: test}`, embinit train's "
                    "`--extra train_split=valid --extra eval_split=test`)")
        if layout.release:
            hint += iwslt.release_hint(folder) if kind.two_sided else multinli.release_hint(folder)
        if (folder / task).is_dir() and (all(_pick(folder / task, layout.files[s], suffixes) for s in splits.values())
                                         or _export(task, layout, folder / task)):
            # the folder that holds one folder per task, given where the task's own folder goes
            hint += (f"; {folder / task} holds them: the task's own folder is the one to give (embinit train's "
                     f"--data-dir, a spec task's data_dir), the folder above it a spec's data_dir")
        raise MissingFiles(f"{task}: data folder {folder} lacks {'; '.join(missing)}{hint}")
    return found


def present_problems(task: str, layout: Layout, folder: Path, splits: dict[str, str]) -> list[str]:
    """What reading the files of `splits` that `folder` holds refuses, for a folder that lacks others
    (`MissingFiles`): their bad rows come with the missing files, not one round later. Labels taken from a
    missing train file leave the rest unread, as it says."""
    present = {}
    for split, source in splits.items():
        try:
            find_files(task, layout, folder, {split: source})
            present[split] = source
        except MissingFiles:
            continue
    try:
        if present:
            read_local(task, layout, folder, present)
    except MissingFiles:
        return [f"its other files not read until {layout.files['train'][0]} is there (the labels come from it)"]
    except EmbinitError as e:
        return [str(e)]
    return []


def _trailing_blanks_dropped(lines: list[str]) -> list[str]:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def read_parallel(src_path: Path, tgt_path: Path) -> list[tuple[str, str]]:
    """Line-aligned (src, tgt) pairs. Blank lines at a file's end are no pairs; a line blank on both
    sides is skipped; a line blank on one side only (a sign of misalignment, and an empty target or
    source to train and score on) is an error naming each such line."""
    (src, src_bad), (tgt, tgt_bad) = decoded_lines(src_path), decoded_lines(tgt_path)
    problems = [*src_bad.values(), *tgt_bad.values()]   # both files' lines that are not UTF-8, with the rest
    unit = "lines"
    if iwslt.is_release_file(src_path):
        src, tgt, unit = iwslt.read_release_file(src), iwslt.read_release_file(tgt), "sentences"
    src, tgt = _trailing_blanks_dropped(src), _trailing_blanks_dropped(tgt)
    if len(src) != len(tgt):
        raise problems_error(src_path.parent, [
            *problems, f"misaligned parallel files: {src_path} has {len(src)} {unit} but {tgt_path} has "
                       f"{len(tgt)} (not counting blank lines at the end)"])
    pairs = []
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


def read_local(task: str, layout: Layout, folder: Path, splits: dict[str, str]) -> RawData:
    """Read the splits (TaskData name -> source name) of `task` from `folder`."""
    if (how := _export(task, layout, folder)) is not None:
        return exports.read(task, folder, how, splits)
    files = find_files(task, layout, folder, splits)
    derived = layout.kind == "classification" and not layout.labels
    if derived:
        [train] = find_files(task, layout, folder, {"train": "train"})["train"]
        layout = derive_labels(train, layout)
    read = load(kind_entry(layout.kind).read_split)
    out, problems = {}, []
    for split, paths in files.items():   # every file's problems at once, not the first file's alone
        try:
            out[split] = read(paths, layout)
        except EmbinitError as e:
            problems.append(str(e))
            continue
        if not out[split]:   # a header alone, blank lines: every trial would fail on it (tasks.build)
            problems.append(f"{' and '.join(str(p) for p in paths)}: no examples (the {split} split is empty)")
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
    if layout.release and multinli.is_release_file(paths[0]):
        return multinli.read(paths[0], layout)
    return READERS[layout.format](paths[0], layout)


def read_stream(paths: list[Path], layout: Layout) -> list[str]:
    """A text file's lines; a JSONL corpus's (a task defined so) text values, each split into its lines, so
    the stream is the one the same text as a file gives."""
    if layout.format != "jsonl":
        return [line.strip() for line in read_lines(paths[0])]
    rows = jsonl_rows(paths[0], layout, label=False)
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
