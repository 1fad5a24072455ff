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


def test_a_gz_text_file_that_is_not_utf8_is_named_by_its_own_lines(tmp_path):
    """read_lines (a language model's stream files, a vocabulary) named the lines of a .gz file's compressed
    bytes, not of its text."""
    from embinit.text_files import read_lines
    path = tmp_path / "wiki.train.tokens.gz"
    with gzip.open(path, "wb") as f:
        f.write("first line\n".encode() + "caf\xe9 au lait\n".encode("latin-1") + b"third\n")
    with pytest.raises(EmbinitError) as e:
        read_lines(path)
    assert f"{path}:2: not UTF-8: byte 0xe9 at column 4 in 'caf\\xe9 au lait'" in str(e.value), str(e.value)
    assert "iconv" in str(e.value)


def test_a_cut_off_gz_file_is_named(tmp_path):
    folder = tmp_path / "raw"
    for stem in ("train", "val", "test_2016_flickr"):
        _gz(folder / f"{stem}.de.gz", DE)
        _gz(folder / f"{stem}.en.gz", EN)
    whole = (folder / "val.en.gz").read_bytes()
    (folder / "val.en.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(EmbinitError, match=r"val\.en\.gz.*gunzip -t"):
        check_files("multi30k", folder)


def _nli(gold, s1, s2, annotators):
    import json
    return json.dumps({"annotator_labels": annotators, "genre": "slate", "gold_label": gold, "pairID": "1n",
                       "promptID": 1, "sentence1": s1, "sentence1_binary_parse": f"( {s1} )",
                       "sentence1_parse": f"(ROOT {s1})", "sentence2": s2, "sentence2_binary_parse": f"( {s2} )",
                       "sentence2_parse": f"(ROOT {s2})"})


def multinli_release(folder):
    """multinli_1.0.zip unpacked: one JSON object a line; a dev line whose annotators reached no majority
    has gold_label "-"."""
    from helpers.files import write
    write(folder / "multinli_1.0_train.jsonl", [
        _nli("neutral", "Cream skimming has two dimensions.", "Product and geography work. ", ["neutral"]),
        _nli("entailment", 'you know "if they decide', "You lose them.", ["entailment"]),
        _nli("contradiction", "Gays and lesbians.", "Heterosexuals.", ["contradiction"])])
    dev = [_nli("neutral", "The new rights are nice", "Everyone likes them", ["neutral", "entailment", "neutral"]),
           _nli("-", "Nobody agrees.", "It is clear.", ["neutral", "contradiction", "entailment"]),
           _nli("contradiction", "A list of winners.", "Nothing is listed.", ["contradiction"] * 5)]
    write(folder / "multinli_1.0_dev_matched.jsonl", dev)
    write(folder / "multinli_1.0_dev_mismatched.jsonl", dev[::-1])
    for name in ("multinli_1.0_train.txt", "README.txt"):   # what else the archive holds: not read
        write(folder / name, ["gold_label\tsentence1"])
    return folder


def test_mnli_reads_the_multinli_release_without_its_no_gold_lines(tmp_path):
    folder = multinli_release(tmp_path / "multinli_1.0")
    check_files("mnli", folder)
    data = load_task("mnli", data_dir=folder, tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.info["sizes"] == {"train": 3, "dev_matched": 2, "dev_mismatched": 2}
    assert data.info["files"]["dev_matched"] == ["multinli_1.0_dev_matched.jsonl"]
    # GLUE's label ids: entailment 0, neutral 1, contradiction 2
    assert [ex[-1] for ex in data.splits["train"]] == [1, 0, 2]
    assert [ex[-1] for ex in data.splits["dev_matched"]] == [1, 2]
    assert [ex[-1] for ex in data.splits["dev_mismatched"]] == [2, 1]


def test_mnli_release_folder_missing_a_file_is_named(tmp_path):
    folder = multinli_release(tmp_path / "multinli_1.0")
    (folder / "multinli_1.0_dev_mismatched.jsonl").unlink()
    with pytest.raises(EmbinitError, match="multinli_1.0_dev_mismatched.jsonl"):
        check_files("mnli", folder)


def test_glue_tsv_files_take_precedence_over_the_multinli_release(tmp_path):
    from helpers.files import write
    folder = multinli_release(tmp_path / "mnli")
    header = "index\tgenre\tsentence1\tsentence2\tlabel1\tgold_label"
    for name in ("train", "dev_matched", "dev_mismatched"):
        write(folder / f"{name}.tsv", [header, "0\tslate\tA b .\tC d .\tneutral\tneutral"])
    data = load_task("mnli", data_dir=folder, tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.info["sizes"] == {"train": 1, "dev_matched": 1, "dev_mismatched": 1}
    assert data.info["files"]["train"] == ["train.tsv"]


def glue_mnli_export(folder, how):
    """nyu-mll/glue's mnli as `datasets` gives it: ClassLabel ids in GLUE's order, -1 on the test splits."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["entailment", "neutral", "contradiction"]),
                                  "idx": datasets.Value("int32")})

    def split(rows):
        return datasets.Dataset.from_dict({"premise": [r[0] for r in rows], "hypothesis": [r[1] for r in rows],
                                           "label": [r[2] for r in rows], "idx": list(range(len(rows)))},
                                          features=features)
    dev = [("The rights are nice ", "Everyone likes them", 1), ("A list of winners.", "Nothing is listed.", 2)]
    test = [("Unlabelled.", "No label.", -1)]
    dd = datasets.DatasetDict({"train": split([("A man runs.", "Someone moves.", 0), ("A dog sits.", "A cat sits.", 1),
                                               ("Kids play.", "Kids sleep.", 2)]),
                               "validation_matched": split(dev), "validation_mismatched": split(dev[::-1]),
                               "test_matched": split(test), "test_mismatched": split(test)})
    if how == "save_to_disk":
        dd.save_to_disk(str(folder))
    else:
        folder.mkdir(parents=True)
        for name, ds in dd.items():
            ds.to_parquet(str(folder / f"{name}-00000-of-00001.parquet"))
    return folder


@pytest.mark.parametrize("how", ["save_to_disk", "parquet"])
def test_mnli_reads_a_datasets_export(tmp_path, how):
    folder = glue_mnli_export(tmp_path / "mnli", how)
    check_files("mnli", folder)
    data = load_task("mnli", data_dir=folder, tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.info["sizes"] == {"train": 3, "dev_matched": 2, "dev_mismatched": 2}
    assert [ex[-1] for ex in data.splits["train"]] == [0, 1, 2]
    assert [ex[-1] for ex in data.splits["dev_matched"]] == [1, 2]
    assert [ex[-1] for ex in data.splits["dev_mismatched"]] == [2, 1]
    assert data.info["loaded_from"] == str(folder.resolve())


def test_a_parquet_export_missing_a_split_names_it(tmp_path):
    folder = glue_mnli_export(tmp_path / "mnli", "parquet")
    (folder / "validation_mismatched-00000-of-00001.parquet").unlink()
    with pytest.raises(EmbinitError, match=r"validation_mismatched-\*\.parquet.*'validation_mismatched'"):
        check_files("mnli", folder)


def test_iwslt_release_one_level_down_or_still_packed_is_named(tmp_path):
    import tarfile

    from helpers.iwslt import iwslt_release
    folder = tmp_path / "iwslt2017"
    iwslt_release(folder / "de-en")   # as `tar xzf de-en.tgz` leaves it
    with pytest.raises(EmbinitError, match=f"{folder / 'de-en'} holds the unpacked de-en release: give that folder"):
        check_files("iwslt2017", folder)
    packed = tmp_path / "packed"
    packed.mkdir()
    with tarfile.open(packed / "de-en.tgz", "w:gz") as tar:
        tar.add(folder / "de-en", arcname="de-en")
    with pytest.raises(EmbinitError, match=r"de-en\.tgz is the de-en release archive: unpack it \(tar xzf de-en\.tgz"):
        check_files("iwslt2017", packed)
    check_files("iwslt2017", folder / "de-en")


def test_multinli_release_one_level_down_or_still_packed_is_named(tmp_path):
    import zipfile
    folder = tmp_path / "mnli"
    multinli_release(folder / "multinli_1.0")   # as `unzip multinli_1.0.zip` leaves it
    with pytest.raises(EmbinitError, match=f"{folder / 'multinli_1.0'} holds the unpacked MultiNLI 1.0 release"):
        check_files("mnli", folder)
    packed = tmp_path / "packed"
    packed.mkdir()
    with zipfile.ZipFile(packed / "multinli_1.0.zip", "w") as z:
        for f in (folder / "multinli_1.0").iterdir():
            z.write(f, f"multinli_1.0/{f.name}")
    with pytest.raises(EmbinitError, match=r"unpack it \(unzip multinli_1\.0\.zip"):
        check_files("mnli", packed)
