"""IWSLT2017 de-en in its release form (the `2017-01-trnted/texts/de/en/de-en.tgz` archive, unpacked).

Read exactly as the Hugging Face `iwslt2017` builder reads it, so that a local release and the hub give
the same sentences: train = `train.tags.de-en.{de,en}` without its metadata lines (`<url>`, `<talkid>`,
...); val = `IWSLT17.TED.dev2010.de-en.{de,en}.xml`; test = the `tst2010` ... `tst2015` XML files in
that order; from the XML files only the `<seg id=...>` contents (entities are kept as written, as the
hub does). Aligned line files (`train.de`, `val.de`, ...) take precedence when both are present.
"""

from __future__ import annotations

import re
from pathlib import Path

from embinit.errors import EmbinitError

PAIR = "de-en"
TEST_YEARS = (2010, 2011, 2012, 2013, 2014, 2015)
_SEG = re.compile(r"<seg[^>]*>(.*)</seg>")


def _stems(split: str) -> list[str]:
    if split == "train":
        return [f"train.tags.{PAIR}.{{lang}}"]
    if split == "val":
        return [f"IWSLT17.TED.dev2010.{PAIR}.{{lang}}.xml"]
    return [f"IWSLT17.TED.tst{year}.{PAIR}.{{lang}}.xml" for year in TEST_YEARS]


def is_release(folder: Path) -> bool:
    return (folder / f"train.tags.{PAIR}.de").is_file()


def release_files(folder: Path, splits: dict[str, str], langs: tuple[str, str]) -> dict[str, list[Path]]:
    """{split: [src_1, tgt_1, src_2, tgt_2, ...]}; every missing file is named in one error."""
    found, missing = {}, []
    for split in splits:
        paths = [folder / stem.format(lang=lang) for stem in _stems(split) for lang in langs]
        missing += [p.name for p in paths if not p.is_file()]
        found[split] = paths
    if missing:
        raise EmbinitError(f"iwslt2017: release folder {folder} lacks {', '.join(missing)}")
    return found


def is_release_file(path: Path) -> bool:
    return path.name.startswith("train.tags.") or path.name.endswith(".xml")


def read_release_file(lines: list[str]) -> list[str]:
    """Sentences of one release file: lines starting with "<" are metadata, except <seg> lines."""
    out = []
    for line in lines:
        line = line.strip()
        if line.startswith("<"):
            match = _SEG.match(line)
            if not match:
                continue
            line = match.group(1).strip()
        out.append(line)
    return out


def release_hint(folder: Path) -> str:
    """For a folder that holds neither the aligned line files nor the release: where the release is, when
    it is there in another form (unpacked one level down, as `tar xzf de-en.tgz` leaves it; still packed),
    else which files the release has."""
    inner = folder / PAIR
    if is_release(inner):
        return f"; {inner} holds the unpacked {PAIR} release: give that folder"
    packed = sorted(p.name for p in folder.glob(f"{PAIR}.*") if p.name.endswith((".tgz", ".tar.gz", ".zip")))
    if packed:
        how = f"unzip {packed[0]}" if packed[0].endswith(".zip") else f"tar xzf {packed[0]}"
        return (f"; {packed[0]} is the {PAIR} release archive: unpack it ({how}, in {folder}) and give "
                f"{inner}")
    return f" (or the unpacked {PAIR} release: train.tags.{PAIR}.de/.en and the IWSLT17.TED.*.xml files)"

