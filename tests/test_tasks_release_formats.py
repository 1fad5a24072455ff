"""Data folders in the form the datasets' own releases ship them, on tiny files written here."""

import gzip

import pytest

from embinit.errors import EmbinitError
from embinit.tasks import load_task
from embinit.tasks.load import check_files

DE = ["Zwei Männer stehen .", "Ein Hund läuft .", "Eine Frau singt ."]
EN = ["Two men stand .", "A dog runs .", "A woman sings ."]


def _gz(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def test_multi30k_gzipped_raw_files_are_read(tmp_path):
    """The multi30k-dataset repository's data/task1/raw holds train.de.gz, val.en.gz, test_2016_flickr.de.gz ..."""
    folder = tmp_path / "raw"
    for stem in ("train", "val", "test_2016_flickr"):
        _gz(folder / f"{stem}.de.gz", DE)
        _gz(folder / f"{stem}.en.gz", EN)
    check_files("multi30k", folder)
    data = load_task("multi30k", data_dir=folder, tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.info["sizes"] == {"train": 3, "val": 3, "test": 3}
    assert data.info["files"]["train"] == ["train.de.gz", "train.en.gz"]
    assert data.references["test"] == [e.lower() for e in EN]
    assert data.src_vocab.decode(data.splits["train"][0][0]) == "zwei männer stehen .".split()


def test_a_cut_off_gz_file_is_named(tmp_path):
    folder = tmp_path / "raw"
    for stem in ("train", "val", "test_2016_flickr"):
        _gz(folder / f"{stem}.de.gz", DE)
        _gz(folder / f"{stem}.en.gz", EN)
    whole = (folder / "val.en.gz").read_bytes()
    (folder / "val.en.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(EmbinitError, match=r"val\.en\.gz.*gunzip -t"):
        check_files("multi30k", folder)
