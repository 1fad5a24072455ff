"""Bad input fails before training with one clear EmbinitError naming the problem and the value."""

import pytest

from embinit.errors import EmbinitError
from embinit.tasks import load_task
from embinit.tasks import hub
from helpers.files import write


def load(task, folder, **kw):
    return load_task(task, data_dir=folder, tokenizer="whitespace", min_freq=1, cache_dir=False, **kw)


def test_unknown_task_lists_valid_ones():
    with pytest.raises(EmbinitError, match=r"'multi31k' is not a registered task.*'multi30k'.*'sst2'"):
        load_task("multi31k")


def test_missing_files_are_named_with_the_folder(tmp_path):
    folder = tmp_path / "m"
    write(folder / "train.de", ["a"])
    write(folder / "train.en", ["a"])
    write(folder / "val.de", ["a"])
    with pytest.raises(EmbinitError) as e:
        load("multi30k", folder)
    msg = str(e.value)
    assert str(folder) in msg and "val.en" in msg and "test_2016_flickr.de" in msg
    assert "train.de" not in msg


def test_only_the_missing_file_of_a_pair_is_named(tmp_path):
    """val.de present, val.en not: the message names val.en alone (it said "lacks val.de or val.en"), and a
    split with neither file needs both."""
    folder = tmp_path / "m"
    for name in ("train.de", "train.en", "val.de"):
        write(folder / name, ["a"])
    with pytest.raises(EmbinitError) as e:
        load("multi30k", folder)
    msg = str(e.value)
    assert f"data folder {folder} lacks val.en; test_2016_flickr.de and test_2016_flickr.en" in msg
    assert "val.de" not in msg


def test_missing_wikitext_train_suggests_the_split_option(tmp_path):
    write(tmp_path / "wt" / "wiki.valid.tokens", ["a"])
    write(tmp_path / "wt" / "wiki.test.tokens", ["a"])
    with pytest.raises(EmbinitError, match=r"wiki\.train\.tokens.*train_split='valid'") as e:
        load("wikitext2", tmp_path / "wt")
    # where to pass them: a spec's extras, embinit train's --extra (the spec check prints this hint)
    assert "`extras: {train_split: valid, eval_split: test}`" in str(e.value)
    assert "`--extra train_split=valid --extra eval_split=test`" in str(e.value)


def test_data_dir_that_is_not_a_folder(tmp_path):
    with pytest.raises(EmbinitError, match="is not a folder"):
        load("sst2", tmp_path / "nowhere")


def test_misaligned_line_files_name_both_files_and_counts(tmp_path):
    folder = tmp_path / "m"
    for stem in ("train", "val", "test_2016_flickr"):
        write(folder / f"{stem}.de", ["x", "y", "z"])
        write(folder / f"{stem}.en", ["x", "y", "z"])
    write(folder / "val.en", ["x", "y"])
    with pytest.raises(EmbinitError) as e:
        load("multi30k", folder)
    msg = str(e.value)
    assert "val.de has 3 lines" in msg and "val.en has 2" in msg


def test_unicode_line_separator_does_not_misalign(tmp_path):
    # str.splitlines would split this line in two and report a misalignment.
    folder = tmp_path / "m"
    for stem in ("train", "val", "test_2016_flickr"):
        write(folder / f"{stem}.de", ["ein\u2028hund", "b"])
        write(folder / f"{stem}.en", ["a dog", "b"])
    assert len(load("multi30k", folder).splits["train"]) == 2


def sst2(folder, train_rows, dev_rows=("good\t1",)):
    write(folder / "train.tsv", ["sentence\tlabel", *train_rows])
    write(folder / "dev.tsv", ["sentence\tlabel", *dev_rows])
    return folder


def test_malformed_tsv_row_gives_file_and_line(tmp_path):
    folder = sst2(tmp_path / "s", ["fine film\t1", "no label here", "ok\t0"])
    with pytest.raises(EmbinitError, match=r"train\.tsv:3: expected 2 tab-separated fields.*got 1"):
        load("sst2", folder)


def test_tsv_header_without_required_column(tmp_path):
    folder = tmp_path / "s"
    write(folder / "train.tsv", ["text\tlabel", "fine\t1"])
    write(folder / "dev.tsv", ["sentence\tlabel", "fine\t1"])
    with pytest.raises(EmbinitError, match=r"train\.tsv:1: header lacks column\(s\) \['sentence'\]"):
        load("sst2", folder)


def test_unknown_label_value(tmp_path):
    folder = sst2(tmp_path / "s", ["fine\t1"], dev_rows=["bad\t0", "odd\t2"])
    with pytest.raises(EmbinitError, match=r"dev\.tsv:3: unknown label '2'; valid labels: \['0', '1'\]"):
        load("sst2", folder)


def test_unknown_mnli_label(tmp_path):
    folder = tmp_path / "mnli"
    rows = ["sentence1\tsentence2\tgold_label", "a\tb\tentailment", "a\tc\t-"]
    for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        write(folder / name, rows)
    with pytest.raises(EmbinitError, match=r"unknown label '-'.*entailment"):
        load("mnli", folder)


def test_not_utf8(tmp_path):
    folder = sst2(tmp_path / "s", ["fine\t1"])
    (folder / "train.tsv").write_bytes(b"sentence\tlabel\ncaf\xe9\t1\n")
    with pytest.raises(EmbinitError, match="not UTF-8"):
        load("sst2", folder)


@pytest.mark.parametrize("kwargs, match", [
    ({"min_freq": 0}, "min_freq must be >= 1, got 0"),   # the bounds of embinit.bounds, as the spec's
    ({"min_freq": 1.5}, "min_freq must be an integer, got 1.5"),
    ({"max_len": -3}, "max_len must be >= 2, got -3"),
    ({"max_len": 1}, "max_len must be >= 2, got 1"),
    ({"max_train_examples": 0}, "max_train_examples must be >= 1, got 0"),
    ({"train_split": "valid"}, "train_split/eval_split apply to language-model tasks only"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(EmbinitError, match=match):
        load_task("synthetic_translation", cache_dir=False, tokenizer="whitespace", **kwargs)


def test_bad_lm_split_choice():
    with pytest.raises(EmbinitError, match=r"train_split='dev' is not a split"):
        load_task("synthetic_lm", tokenizer="whitespace", cache_dir=False, train_split="dev")
    with pytest.raises(EmbinitError, match="both 'test'"):
        load_task("synthetic_lm", tokenizer="whitespace", cache_dir=False, train_split="test",
                  eval_split="test")


def test_missing_tokenizer_folder():
    with pytest.raises(EmbinitError, match=r"tokenizer folder './no/such/tokenizer' does not exist"):
        load_task("synthetic_classification", tokenizer="./no/such/tokenizer", cache_dir=False)


def test_no_local_data_and_hub_unreachable_says_where_it_looked(monkeypatch):
    def offline(path, config):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(hub, "_load_dataset", offline)
    with pytest.raises(EmbinitError) as e:
        load_task("multi30k", tokenizer="whitespace", cache_dir=False)
    msg = str(e.value)
    assert "EMBINIT_DATA_DIR not set" in msg and "bentrevett/multi30k" in msg
    assert "ConnectionError" in msg and "train.{de,en}" in msg and "data_dir" in msg


def test_env_root_without_the_task_folder_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBINIT_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(hub, "_load_dataset", lambda p, c: (_ for _ in ()).throw(OSError("offline")))
    with pytest.raises(EmbinitError, match=rf"EMBINIT_DATA_DIR/sst2 = {tmp_path / 'sst2'} does not exist"):
        load_task("sst2", tokenizer="whitespace", cache_dir=False)


def test_empty_split(tmp_path):
    folder = sst2(tmp_path / "s", ["fine\t1"], dev_rows=[])
    with pytest.raises(EmbinitError, match=r"dev\.tsv: no examples \(the dev split is empty\)"):
        load("sst2", folder)


def test_nli_rows_with_fewer_annotator_labels_are_read_extra_fields_are_not(tmp_path):
    folder = tmp_path / "mnli"
    header = "index\tsentence1\tsentence2\tlabel1\tlabel2\tgold_label"
    good = [header, "0\ta\tb\tneutral\tneutral\tneutral", "1\ta\tc\tcontradiction\tcontradiction"]
    for name in ("train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"):
        write(folder / name, good)
    data = load("mnli", folder)
    assert [r[2] for r in data.splits["train"]] == [1, 2]
    write(folder / "dev_matched.tsv", good + ["2\ta\tb\tx\tneutral\tneutral\tneutral"])
    with pytest.raises(EmbinitError, match=r"dev_matched\.tsv:4: expected 6 tab-separated fields.*got 7"):
        load("mnli", folder)


def test_every_bad_row_of_every_file_is_listed_in_one_error(tmp_path):
    """The first bad row alone was reported: a file with three needed three rounds of fixing."""
    folder = sst2(tmp_path / "s", ["fine\t1", "bad\tx", "ok\t0", "worse\ty", "a\tb\tc"], dev_rows=["odd\t2"])
    with pytest.raises(EmbinitError) as e:
        load("sst2", folder)
    msg = str(e.value)
    assert "train.tsv: 3 problems" in msg
    for where in ("train.tsv:3: unknown label 'x'", "train.tsv:5: unknown label 'y'",
                  "train.tsv:6: expected 2 tab-separated fields", "dev.tsv:2: unknown label '2'"):
        assert where in msg, where


def test_not_utf8_names_each_line_and_its_byte(tmp_path):
    """The error gave the decoder's offset within its read buffer ('position 250'), not a line."""
    folder = sst2(tmp_path / "s", ["fine\t1"])
    (folder / "train.tsv").write_bytes(b"sentence\tlabel\nfine\t1\ncaf\xe9\t1\nok\t0\nna\xefve\t0\n")
    with pytest.raises(EmbinitError) as e:
        load("sst2", folder)
    msg = str(e.value)
    assert "train.tsv:3: not UTF-8: byte 0xe9 at column 4" in msg
    assert "train.tsv:5: not UTF-8: byte 0xef at column 3" in msg and "iconv" in msg


def test_a_latin1_file_of_many_lines_keeps_the_fix_in_its_error(tmp_path):
    """The hint to re-encode rode on the last line that is not UTF-8, which an error naming the first ten
    problems cut off: a real Latin-1 file (hundreds of such lines) was told neither what nor how."""
    folder = sst2(tmp_path / "s", ["fine\t1"])
    (folder / "train.tsv").write_bytes(b"sentence\tlabel\n" + b"".join(b"caf\xe9 %d\t1\n" % i for i in range(12)))
    with pytest.raises(EmbinitError) as e:
        load("sst2", folder)
    assert "(and 2 more)" in str(e.value) and "iconv -f latin1 -t utf-8" in str(e.value)


def _multi30k(folder, train_de, train_en):
    for stem in ("val", "test_2016_flickr"):
        write(folder / f"{stem}.de", ["ein hund", "eine katze"])
        write(folder / f"{stem}.en", ["a dog", "a cat"])
    (folder / "train.de").write_text(train_de, encoding="utf-8")
    (folder / "train.en").write_text(train_en, encoding="utf-8")
    return folder


def test_blank_parallel_lines_are_no_pairs_and_a_one_sided_blank_is_an_error(tmp_path):
    """Blank lines were read as pairs: ('', '') trained on (and in val/test an empty reference scored),
    ('ein hund', '') silently; a trailing blank line in one file only was a misalignment."""
    folder = _multi30k(tmp_path / "m", "ein hund\n\neine katze\n\n\n", "a dog\n\na cat\n")
    assert load("multi30k", folder).info["sizes"]["train"] == 2
    folder = _multi30k(tmp_path / "m1", "ein hund\n\neine katze\nein haus\nende\n",
                      "a dog\na bird\na cat\n\nthe end\n")
    with pytest.raises(EmbinitError) as e:
        load("multi30k", folder)
    msg = str(e.value)
    assert "2 problems" in msg
    assert "train.de:2: blank, but line 2 of train.en is not" in msg
    assert "train.en:4: blank, but line 4 of train.de is not" in msg


def test_labels_without_names_count_every_splits_ids():
    """Hub data without label names: the classifier gets an output for every id any split uses (a dev
    label missing from train, ids with a gap), not only the train labels' count."""
    from embinit.tasks.build import build_classification
    from embinit.tasks.raw import RawData
    from embinit.tasks.tokenization import resolve_tokenizer
    from embinit.tasks.tokenizer_backends import WhitespaceBackend
    rows = {"train": [("a good film", 0), ("a bad film", 2), ("good", 0)], "dev": [("a film", 3)]}
    tok = WhitespaceBackend(resolve_tokenizer("whitespace"))
    built = build_classification(RawData("classification", rows, ["dev"], "test"), {"tok": tok}, 1, 16, False)
    assert built["num_labels"] == 4 and built["info"]["label_names"] == ["0", "1", "2", "3"]
    named = RawData("classification", rows, ["dev"], "test", label_names=["w", "x", "y", "z"])
    assert build_classification(named, {"tok": tok}, 1, 16, False)["num_labels"] == 4


def test_a_line_that_is_not_utf8_hides_no_other_problem_of_its_file(tmp_path):
    """A latin-1 line made the file's error name the lines that are not UTF-8 alone: its ragged rows and
    unknown labels came one fix later. Each is named now, in line order, the re-encode hint with them."""
    folder = sst2(tmp_path / "s", ["fine\t1"])
    (folder / "train.tsv").write_bytes(b"sentence\tlabel\nfine\t1\ncaf\xe9\t1\nragged\t1\textra\nodd\t7\n")
    with pytest.raises(EmbinitError) as e:
        load("sst2", folder)
    msg = str(e.value)
    assert "train.tsv: 3 problems" in msg
    assert (f"{folder}/train.tsv:3: not UTF-8: byte 0xe9 at column 4 in 'caf\\xe9\t1'; re-encode the file as UTF-8 "
            f"(e.g. iconv -f latin1 -t utf-8) | {folder}/train.tsv:4: expected 2 tab-separated fields as in the "
            f"header, got 3: 'ragged\\t1\\textra' | {folder}/train.tsv:5: unknown label '7'") in msg


@pytest.mark.parametrize("fmt, columns, rows", [
    ("csv", ("text", "label"), b'text,label\n"caf\xe9",1\nfine,1\nragged,1,extra\nodd,7\n'),
    ("jsonl", ("text", "label"), b'{"text": "caf\xe9", "label": 1}\n{"text": "fine", "label": 1}\n[1]\n'
                                 b'{"text": "odd", "label": 7}\n'),
])
def test_csv_and_jsonl_name_each_line_that_is_not_utf8_beside_their_other_problems(tmp_path, fmt, columns, rows):
    from embinit.task_types import Layout
    from embinit.tasks.labelled import READERS
    path = tmp_path / f"train.{fmt}"
    path.write_bytes(rows)
    layout = Layout("classification", {"train": (path.name,)}, ("dev",), columns=columns, labels=("0", "1"),
                    label_names=("0", "1"), format=fmt)
    with pytest.raises(EmbinitError) as e:
        READERS[fmt](path, layout)
    msg = str(e.value)
    first = 2 if fmt == "csv" else 1
    assert f"{path}: 3 problems: {path}:{first}: not UTF-8: byte 0xe9" in msg
    assert f"{path}:{first + 2}: " in msg and f"{path}:{first + 3}: unknown label '7'" in msg


def test_both_files_of_a_pair_name_their_lines_that_are_not_utf8(tmp_path):
    """train.de's latin-1 lines were named, train.en's only once train.de was fixed."""
    folder = _multi30k(tmp_path / "m", "ein hund\neine katze\n", "a dog\na cat\n")
    (folder / "train.de").write_bytes(b"ein hund\nStra\xdfe\n")
    (folder / "train.en").write_bytes(b"caf\xe9\na cat\n")
    with pytest.raises(EmbinitError) as e:
        load("multi30k", folder)
    msg = str(e.value)
    assert "2 problems" in msg
    assert f"{folder}/train.de:2: not UTF-8: byte 0xdf at column 5" in msg
    assert f"{folder}/train.en:1: not UTF-8: byte 0xe9 at column 4" in msg


def test_a_split_with_no_examples_is_refused_by_the_spec_check(tmp_path):
    """A header without rows passed the spec's check of the data folder (check_files): the sweep started
    and each trial failed on 'split(s) ['train'] have no examples'. Each empty file is named now, with the
    folder's other problems."""
    from embinit.tasks.load import check_files
    folder = sst2(tmp_path / "sst2", [""])
    (folder / "dev.tsv").write_text("sentence\tlabel\nodd\t7\n")
    with pytest.raises(EmbinitError) as e:
        check_files("sst2", folder)
    msg = str(e.value)
    assert f"{folder}/train.tsv: no examples (the train split is empty)" in msg
    assert f"{folder}/dev.tsv:2: unknown label '7'" in msg
    folder = _multi30k(tmp_path / "m", "ein hund\n", "a dog\n")
    for name in ("val.de", "val.en"):
        (folder / name).write_text("\n")
    with pytest.raises(EmbinitError, match=f"{folder}/val.de and {folder}/val.en: no examples "
                                           r"\(the val split is empty\)"):
        check_files("multi30k", folder)


def test_the_folder_above_a_tasks_folder_given_as_its_folder_points_at_it(tmp_path):
    """`embinit train --data-dir /data` (the folder of task folders, as $EMBINIT_DATA_DIR) said only that
    /data lacks train.tsv and dev.tsv, not that /data/sst2 holds them."""
    sst2(tmp_path / "sst2", ["fine\t1"])
    with pytest.raises(EmbinitError) as e:
        load("sst2", tmp_path)
    assert str(e.value) == (f"sst2: data folder {tmp_path} lacks train.tsv; dev.tsv; {tmp_path / 'sst2'} holds them: "
                            "the task's own folder is the one to give (embinit train's --data-dir, a spec task's "
                            "data_dir), the folder above it a spec's data_dir")
