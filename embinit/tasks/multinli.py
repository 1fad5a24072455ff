"""MultiNLI 1.0 in its release form (`multinli_1.0.zip` from the dataset's authors, unpacked): the mnli task
reads `multinli_1.0_{train,dev_matched,dev_mismatched}.jsonl` where its folder lacks GLUE's `train.tsv`.

Read as GLUE and the Hugging Face copies (`nyu-mll/glue` mnli, `nyu-mll/multi_nli`) read it, so the three
give the same examples: `sentence1`, `sentence2` and `gold_label` of each line, and a line whose
`gold_label` is "-" (its five annotators reached no majority: 185 of dev_matched's 10,000 lines, 168 of
dev_mismatched's) is left out, as GLUE left it out of its TSV files. GLUE's TSV files take precedence
when both are present.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from embinit.errors import EmbinitError
from embinit.task_types import Layout
from embinit.tasks.labelled import jsonl_rows, read_rows

PREFIX = "multinli_1.0_"
NO_GOLD = "-"   # the gold_label of a line without a majority label


def _name(split: str) -> str:
    return f"{PREFIX}{split}.jsonl"


def is_release(folder: Path) -> bool:
    return (folder / _name("train")).is_file()


def release_files(folder: Path, splits: dict[str, str]) -> dict[str, list[Path]]:
    """{split: [its jsonl file]}; every missing file is named in one error."""
    found = {split: [folder / _name(source)] for split, source in splits.items()}
    missing = [ps[0].name for ps in found.values() if not ps[0].is_file()]
    if missing:
        raise EmbinitError(f"mnli: MultiNLI 1.0 release folder {folder} lacks {', '.join(missing)}")
    return found


def is_release_file(path: Path) -> bool:
    return path.name.startswith(PREFIX) and path.name.endswith(".jsonl")


def read(path: Path, layout: Layout) -> list[tuple]:
    """[(sentence1, sentence2, label_id)] of one release file, its lines without a gold label left out;
    every other bad line named in one error, as for any JSON Lines file."""
    layout = dataclasses.replace(layout, format="jsonl")
    rows = [r for r in jsonl_rows(path, layout) if isinstance(r, str) or r[1][-1].strip() != NO_GOLD]
    return read_rows(rows, path, layout)


def release_hint(folder: Path) -> str:
    """For a folder that holds neither GLUE's TSV files nor the release: where the release is, when it is
    there in another form (unpacked one level down, as `unzip multinli_1.0.zip` leaves it; still packed)."""
    inner = folder / "multinli_1.0"
    if is_release(inner):
        return f"; {inner} holds the unpacked MultiNLI 1.0 release: give that folder"
    if (folder / "multinli_1.0.zip").is_file():
        return (f"; multinli_1.0.zip is the MultiNLI 1.0 release archive: unpack it (unzip multinli_1.0.zip, in "
                f"{folder}) and give {inner}")
    return ""

