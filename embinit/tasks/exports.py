"""A built-in task's data in a local folder as Hugging Face `datasets` exports it: `DatasetDict.save_to_disk`
(dataset_dict.json and one folder of .arrow files per split) or parquet files named by split, as the hub
repository holds them (`nyu-mll/glue`'s `mnli/validation_matched-00000-of-00001.parquet`; or
`<split>.parquet`, as `Dataset.to_parquet` is often given). The splits are the hub copy's
(`Hub.splits`: GLUE's `validation_matched`, not `dev_matched`) and each row is converted as a hub download's
is (`hub_rows.convert`: ClassLabel ids as they are, GLUE's order), so an export and the hub give the same
examples. A folder with the task's raw files (GLUE's train.tsv, ...) is read as those (`tasks.local`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from embinit.errors import EmbinitError
from embinit.task_registry import task_entry
from embinit.tasks.hub_rows import convert
from embinit.tasks.raw import MissingFiles, RawData

SAVED = "save_to_disk"
PARQUET = "parquet"


def _hub_splits(task: str) -> dict[str, str] | None:
    """{TaskData split: hub split} of a task with a hub copy (a defined task has none)."""
    hub = task_entry(task).hub
    return None if hub is None else {ours: theirs for theirs, ours in hub.splits.items()}


def _parquet(folder: Path, split: str) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".parquet"
                  and (p.stem == split or p.stem.startswith(f"{split}-")))


def kind(task: str, folder: Path) -> str | None:
    """SAVED or PARQUET where `folder` holds such an export of the task's hub dataset, else None."""
    names = _hub_splits(task)
    if names is None or not folder.is_dir():
        return None
    if (folder / "dataset_dict.json").is_file():
        return SAVED
    return PARQUET if any(_parquet(folder, split) for split in names.values()) else None


def files(task: str, folder: Path, how: str, splits: dict[str, str]) -> dict[str, list[Path]]:
    """{TaskData split: its files} (`splits`: TaskData split -> source split); every split the export
    lacks named in one error, with those it has."""
    names = _hub_splits(task)
    found, missing = {}, []
    for split, source in splits.items():
        hub_split = names[source]
        if how == SAVED:
            paths = sorted(p for p in (folder / hub_split).glob("*") if p.is_file())
            ok = (folder / hub_split / "state.json").is_file()
        else:
            paths = _parquet(folder, hub_split)
            ok = bool(paths)
        found[split] = paths
        if not ok:
            missing.append(hub_split)
    if missing:
        held = (sorted(p.name for p in folder.iterdir() if p.is_dir()) if how == SAVED
                else sorted(p.name for p in folder.glob("*.parquet")))
        what = "split folder" if how == SAVED else f"{' or '.join(f'{s}-*.parquet' for s in missing)} file"
        raise MissingFiles(f"{task}: {folder} holds a Hugging Face datasets export ({how}) without the "
                           f"{what}{'s' if len(missing) > 1 else ''} of split(s) {missing} (its hub split names); "
                           f"it holds {held}")
    return found


def read(task: str, folder: Path, how: str, splits: dict[str, str]) -> RawData:
    """The splits of an export, converted as the hub copy is."""
    names = _hub_splits(task)
    paths = files(task, folder, how, splits)
    try:
        if how == SAVED:
            import datasets
            ds = datasets.load_from_disk(str(folder))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq
            ds = {names[source]: pa.concat_tables([pq.read_table(p) for p in paths[split]]).to_pylist()
                  for split, source in splits.items()}
    except Exception as e:   # a broken .arrow / .parquet file: pyarrow and datasets raise many kinds
        raise EmbinitError(f"{task}: cannot read the Hugging Face datasets export ({how}) in {folder}: "
                           f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    raw = convert(task, ds, splits, source=f"{folder} ({how})")
    info = {"files": {s: [str(p.relative_to(folder)) for p in ps] for s, ps in paths.items()}, "export": how}
    return dataclasses.replace(raw, loaded_from=str(folder.resolve()), extra_info=info)
