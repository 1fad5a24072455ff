"""Local loaders on tiny files written here: line files, GLUE TSVs, WikiText tokens."""

from collections import Counter

import pytest

from embinit.errors import EmbinitError
from embinit.tasks import TaskData, load_task
from embinit.vocab import EOS, SPECIALS, UNK
from helpers.files import write
from helpers.iwslt import iwslt_release

DE = ["ein hund läuft .", "ein mann sitzt .", "eine frau läuft .", "ein hund sitzt ."]
EN = ["a dog runs .", "a man sits .", "a woman runs .", "a dog sits ."]


def translation_dir(folder, val="val", test="test_2016_flickr"):
    for stem, de, en in (("train", DE, EN), (val, DE[:2], ["A dog runs!", "A man sits."]),
                         (test, DE[2:], EN[2:])):
        write(folder / f"{stem}.de", de)
        write(folder / f"{stem}.en", en)
    return folder


def test_multi30k_line_files(tmp_path):
    data = load_task("multi30k", data_dir=translation_dir(tmp_path / "m"), tokenizer="whitespace",
                     min_freq=1, cache_dir=tmp_path / "c")
    assert isinstance(data, TaskData) and data.kind == "translation" and data.num_labels is None
    assert sorted(data.splits) == ["test", "train", "val"] and data.eval_splits == ["val", "test"]
    assert len(data.splits["train"]) == 4 and len(data.splits["test"]) == 2
    src_ids, tgt_ids = data.splits["train"][0]
    assert data.src_vocab.decode(src_ids) == DE[0].split()      # no <bos>/<eos> added
    assert data.vocab.decode(tgt_ids) == EN[0].split()
    assert "hund" in data.src_vocab and "hund" not in data.vocab   # separate vocabularies
    assert data.vocab.tokens[:4] == list(SPECIALS)
    # References are the raw target lines, lowercased like the model's output vocabulary.
    assert data.references["val"] == ["a dog runs!", "a man sits."] and data.info["lowercase"] is True
    assert data.info["sizes"] == {"train": 4, "val": 2, "test": 2}
    assert data.info["loaded_from"] == str((tmp_path / "m").resolve())


def test_iwslt_accepts_valid_as_dev_name(tmp_path):
    data = load_task("iwslt2017", data_dir=translation_dir(tmp_path / "i", val="valid", test="test"),
                     tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.eval_splits == ["val", "test"] and len(data.splits["val"]) == 2
    assert data.info["files"]["val"] == ["valid.de", "valid.en"]


def test_min_freq_keeps_tokens_at_the_threshold(tmp_path):
    folder = translation_dir(tmp_path / "m")
    data = load_task("multi30k", data_dir=folder, tokenizer="whitespace", min_freq=2, cache_dir=False)
    counts = Counter(t for line in EN for t in line.split())
    expected = {t for t, c in counts.items() if c >= 2}
    assert set(data.vocab.tokens[4:]) == expected
    assert "woman" not in data.vocab          # seen once
    woman_pair = data.splits["train"][2]
    assert data.vocab.index(UNK) in woman_pair[1]
    rare = sum(c for c in counts.values() if c < 2)
    assert rare == 2 and data.info["unk_rate"]["train"] == pytest.approx(rare / sum(counts.values()))


def test_max_train_examples_and_max_len(tmp_path):
    folder = translation_dir(tmp_path / "m")
    data = load_task("multi30k", data_dir=folder, tokenizer="whitespace", min_freq=1, max_train_examples=2,
                     max_len=3, cache_dir=False)
    assert len(data.splits["train"]) == 2
    assert data.vocab.decode(data.splits["train"][1][1]) == ["a", "man", "sits"]   # first N, truncated
    assert "woman" not in data.vocab          # the vocabulary counts only the examples kept
    assert all(len(s) <= 3 and len(t) <= 3 for split in data.splits.values() for s, t in split)
    assert data.info["truncated"]["train"] == 2 and data.info["truncated"]["train/src"] == 2
    assert data.info["train_examples_available"] == 4


def test_data_dir_from_environment(tmp_path, monkeypatch):
    translation_dir(tmp_path / "root" / "multi30k")
    monkeypatch.setenv("EMBINIT_DATA_DIR", str(tmp_path / "root"))
    data = load_task("multi30k", tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.info["loaded_from"] == str((tmp_path / "root" / "multi30k").resolve())


def test_sst2_tsv(tmp_path):
    write(tmp_path / "sst2" / "train.tsv", ["sentence\tlabel", "a great film \t1", "a dull film \t0",
                                            "great acting\t1"])
    write(tmp_path / "sst2" / "dev.tsv", ["sentence\tlabel", "a great film \t1"])
    data = load_task("sst2", data_dir=tmp_path / "sst2", tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.kind == "classification" and data.num_labels == 2 and data.eval_splits == ["dev"]
    ids, label = data.splits["train"][1]
    assert data.vocab.decode(ids) == ["a", "dull", "film"] and label == 0
    assert [label for _, label in data.splits["train"]] == [1, 0, 1]
    assert data.info["label_names"] == ["negative", "positive"]


def test_mnli_tsv_pairs_by_header_names(tmp_path):
    header = "index\tgenre\tsentence1\tsentence2\tlabel1\tgold_label"
    rows = ["0\tfiction\tThe cat sat.\tA cat sat.\tentailment\tentailment",
            "1\tfiction\tThe cat sat.\tNo cat \"sat.\tcontradiction\tcontradiction",
            "2\tgov\tA man ran.\tA man slept.\tneutral\tneutral"]
    for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        write(tmp_path / "mnli" / name, [header] + rows)
    data = load_task("mnli", data_dir=tmp_path / "mnli", tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert data.num_labels == 3 and data.eval_splits == ["dev_matched", "dev_mismatched"]
    a, b, label = data.splits["train"][1]
    assert data.vocab.decode(a) == ["the", "cat", "sat."] and data.vocab.decode(b) == ["no", "cat", '"sat.']
    assert [r[2] for r in data.splits["dev_mismatched"]] == [0, 2, 1]   # GLUE's label order


def test_mnli_matched_and_mismatched_files_land_in_their_own_splits(tmp_path):
    """Each dev file in its own split: with the same rows in both (above), a swapped mapping passed."""
    header = "sentence1\tsentence2\tgold_label"
    files = {"train.tsv": ["a b\ta b\tentailment", "a b\tno b\tcontradiction"],
             "dev_matched.tsv": ["a b\ta b\tentailment"],
             "dev_mismatched.tsv": ["a b\tno b\tcontradiction", "a b\tc d\tneutral"]}
    for name, rows in files.items():
        write(tmp_path / "mnli" / name, [header] + rows)
    data = load_task("mnli", data_dir=tmp_path / "mnli", tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert [r[2] for r in data.splits["dev_matched"]] == [0]
    assert [r[2] for r in data.splits["dev_mismatched"]] == [2, 1]


def test_wikitext_streams_and_split_choice(tmp_path):
    folder = tmp_path / "wt"
    write(folder / "wiki.valid.tokens", [" ", " = Title = ", " ", " the cat sat on the mat . "])
    write(folder / "wiki.test.tokens", [" the dog sat . "])
    data = load_task("wikitext2", data_dir=folder, tokenizer="whitespace", min_freq=1, cache_dir=False,
                     train_split="valid", eval_split="test")
    assert data.kind == "lm" and sorted(data.splits) == ["train", "valid"] and data.eval_splits == ["valid"]
    words = data.vocab.decode(data.splits["train"])
    # Every line ends with <eos>, blank ones too (WikiText's convention).
    assert words == [EOS, "=", "title", "=", EOS, EOS, "the", "cat", "sat", "on", "the", "mat", ".", EOS]
    assert data.vocab.decode(data.splits["valid"]) == ["the", UNK, "sat", ".", EOS]
    assert data.info["split_sources"] == {"train": "valid", "valid": "test"}


def test_wikitext_default_splits(tmp_path):
    folder = tmp_path / "wt"
    for split in ("train", "valid", "test"):
        write(folder / f"wiki.{split}.tokens", [f" {split} words here . "])
    data = load_task("wikitext2", data_dir=folder, tokenizer="whitespace", min_freq=1, cache_dir=False,
                     lowercase=False)
    assert data.eval_splits == ["valid", "test"]
    assert data.vocab.decode(data.splits["test"])[0] == UNK   # "test" never occurs in train
    assert data.info["split_sources"] == {"train": "train", "valid": "valid", "test": "test"}


def test_crlf_and_byte_order_mark(tmp_path):
    folder = tmp_path / "sst2"
    folder.mkdir()
    (folder / "train.tsv").write_bytes("\ufeffsentence\tlabel\r\na fine film\t1\r\nbad\t0\r\n".encode())
    (folder / "dev.tsv").write_bytes(b"sentence\tlabel\r\nfine\t1\r\n")
    data = load_task("sst2", data_dir=folder, tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert [(data.vocab.decode(ids), label) for ids, label in data.splits["train"]] == \
        [(["a", "fine", "film"], 1), (["bad"], 0)]


def test_iwslt_release_form_read_like_the_hub(tmp_path):
    data = load_task("iwslt2017", data_dir=iwslt_release(tmp_path / "r"), tokenizer="whitespace", min_freq=1,
                     cache_dir=False, lowercase=False)
    targets = [data.vocab.decode(t) for _, t in data.splits["train"]]
    assert targets == [["Hello", "world", "."], ["Thanks", "."]]                # metadata lines skipped
    assert data.references["val"] == ["Sentence dev2010 &amp; more ."]        # entities kept, as the hub does
    assert data.references["test"] == [f"Sentence tst{y} &amp; more ." for y in range(2010, 2016)]
    assert data.info["files"]["test"][0] == "IWSLT17.TED.tst2010.de-en.de.xml"


def test_iwslt_release_missing_and_misaligned_files(tmp_path):
    folder = iwslt_release(tmp_path / "r", skip=("IWSLT17.TED.tst2013.de-en.en.xml",))
    with pytest.raises(EmbinitError, match=r"release folder .* lacks IWSLT17\.TED\.tst2013\.de-en\.en\.xml"):
        load_task("iwslt2017", data_dir=folder, tokenizer="whitespace", cache_dir=False)
    folder = iwslt_release(tmp_path / "r2")
    write(folder / "train.tags.de-en.en", ["<talkid>1</talkid>", "Hello world ."])
    with pytest.raises(EmbinitError, match=r"train\.tags\.de-en\.de has 2 sentences but .*\.en has 1"):
        load_task("iwslt2017", data_dir=folder, tokenizer="whitespace", cache_dir=False)


def test_the_preflight_reads_sound_files_once_per_content_not_once_per_process(tmp_path, monkeypatch):
    """`check_files` (every `embinit run`, dry run and service process: MNLI's 300 MB train.tsv is ~2 s)
    remembered sound files per process only. A folder read without a problem is marked by its files'
    content: a later process, or a copy of it, is not read again; other bytes of the same size and mtime
    are, and their problem is found; a broken folder is read each time."""
    import os

    from embinit import file_inputs, sound_marks
    from embinit.tasks import load, local
    reads, real = [], local.read_local
    monkeypatch.setattr(local, "read_local", lambda *a: reads.append(a[2]) or real(*a))

    def check(folder):
        monkeypatch.setattr(load, "_READ_WITHOUT_PROBLEMS", set())   # a new process
        monkeypatch.setattr(file_inputs, "_memo", {})
        load.check_files("multi30k", folder)

    folder = translation_dir(tmp_path / "m")
    check(translation_dir(tmp_path / "copy"))
    for _ in range(3):
        check(folder)
    assert len(reads) == 1
    train = folder / "train.en"
    st = os.stat(train)
    train.write_bytes(train.read_bytes().replace(b"a man sits .\n", b"\xe9 man sits .\n"))
    os.utime(train, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(EmbinitError, match="train.en:2: not UTF-8"):
        load.check_files("multi30k", folder)   # this process too (its memo was keyed by size and mtime)
    with pytest.raises(EmbinitError, match="train.en:2: not UTF-8"):
        check(folder)
    assert len(reads) == 3
    monkeypatch.setattr(sound_marks, "source_digest", lambda: "other code")
    check(tmp_path / "copy")
    assert len(reads) == 4
