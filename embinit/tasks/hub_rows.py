"""A hub-shaped dataset's rows (a `DatasetDict` from the hub, an export read from a folder: tasks.exports)
into the `RawData` the local readers produce: `convert`, and one row -> one example per kind (the kind
registry's `hub_row`)."""

from __future__ import annotations

from typing import Any, Mapping

from embinit.errors import EmbinitError
from embinit.task_registry import load, task_entry, task_kind
from embinit.tasks.raw import RawData, label_id


def convert(task: str, ds: Mapping[str, Any], splits: dict[str, str], source: str) -> RawData:
    """Hub-shaped dataset -> RawData. `splits` maps TaskData split -> source split (see raw.lm_split_map)."""
    entry = task_entry(task)
    layout, columns, row = entry.layout, entry.hub.columns, load(task_kind(task).hub_row)
    by_source = {ours: hub for hub, ours in entry.hub.splits.items()}
    out: dict[str, list] = {}
    for split, src_split in splits.items():
        hub_split = by_source[src_split]
        if hub_split not in ds:
            raise EmbinitError(f"{task}: {source} has no split {hub_split!r}; it has {sorted(ds)}")
        where = f"{source} split {hub_split!r}"
        out[split] = _convert_rows(row, layout, ds[hub_split], columns, where)
    evals = [s for s in layout.eval_splits if s in out]
    return RawData(layout.kind, out, evals, source, list(layout.label_names) or None)


def _convert_rows(convert_row, layout, rows, columns, where) -> list:
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(convert_row(row, layout, columns, f"{where} row {i}"))
        except KeyError as e:
            raise EmbinitError(f"{where} row {i}: missing column {e}; it has {sorted(row)}") from None
    return out


# One hub row -> one example, per kind (the kind registry's `hub_row`).

def pair_row(row, layout, columns, where: str) -> tuple[str, str]:
    pair = row["translation"] if "translation" in row else row
    return str(pair[layout.src_lang]).strip(), str(pair[layout.tgt_lang]).strip()


def labelled_row(row, layout, columns, where: str) -> tuple:
    texts = [str(row[c] or "").strip() for c in columns]
    return (*texts, _label(row["label"], layout, where))


def stream_row(row, layout, columns, where: str) -> str:
    return str(row[columns[0]] or "").strip()


def _label(value, layout, where: str) -> int:
    """Hub labels are ints (ClassLabel); some copies store the names instead."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise EmbinitError(f"{where}: unknown label {value!r}; valid labels: {list(layout.labels)}")
    if isinstance(value, int):
        if 0 <= value < len(layout.labels):
            return value
        raise EmbinitError(f"{where}: unknown label {value!r}; valid labels: 0..{len(layout.labels) - 1}")
    if value.strip().lstrip("-").isdigit():
        return _label(int(value), layout, where)
    return label_id(value, layout, where)
