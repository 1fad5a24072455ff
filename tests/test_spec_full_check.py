"""One check lists every problem a spec has that can be found independently (a user fixed 3 problems, then
2 more appeared, then a missing file): field problems, the cross-field problems of the parts that validated,
local paths and data folders, model sizes; what an earlier problem keeps from being checked is said."""

from __future__ import annotations

import pytest

from embinit.cli import main
from embinit.spec import SpecError

# what the check says it did not run (literal, so the command-line tests also run against older code)
CROSS_NOT_CHECKED = ("checks across fields (pretrained sources per init, duplicate inits and tasks, heads vs. D) "
                     "not run until the problems above are fixed")
SIZES_NOT_CHECKED = "model sizes not checked until the problems above are fixed"


def check_spec(*args, **kwargs):
    from embinit.spec.full_check import check_spec
    return check_spec(*args, **kwargs)


def _sst2_folder(root):
    """A data root whose sst2 folder lacks dev.tsv."""
    (root / "sst2").mkdir(parents=True)
    (root / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\t1\n")
    return root


def test_field_problems_come_with_missing_files_and_data_folders(tmp_path):
    root = _sst2_folder(tmp_path / "data")
    spec = {"name": "s", "tasks": [{"task": "sst2", "epochs": 0}], "inits": ["glove+standardise"],
            "pretrained": {"glove": str(tmp_path / "nope.txt")}, "data_dir": str(root)}
    with pytest.raises(SpecError) as e:
        check_spec(spec)
    found = dict(e.value.problems)
    assert "tasks[0].epochs" in found and "inits[0]" in found                     # the field problems
    assert found["pretrained.glove"] == f"{str(tmp_path / 'nope.txt')!r} does not exist"   # hidden before
    assert "sst2: data folder" in found["data_dir"] and "lacks dev.tsv" in found["data_dir"]
    assert e.value.notes == [CROSS_NOT_CHECKED, SIZES_NOT_CHECKED]
    assert str(e.value).startswith("invalid experiment spec (4 problems)")
    assert str(e.value).endswith("model sizes not checked until the problems above are fixed")


def test_a_relative_path_is_checked_next_to_the_spec_file(tmp_path):
    (tmp_path / "s.yaml").write_text("name: s\nretries: -1\ntasks: [sst2]\ninits: [glove]\n"
                                     "pretrained: {glove: ./g.txt}\n")
    with pytest.raises(SpecError) as e:
        check_spec(tmp_path / "s.yaml")
    assert dict(e.value.problems)["pretrained.glove"] == f"{str(tmp_path / 'g.txt')!r} does not exist"


def test_cross_field_problems_of_the_valid_part_come_with_the_field_problems(tmp_path):
    """A problem in a field no other check reads (name, retries, resources, a task's epochs) leaves the rest
    checked across fields: a duplicate init and a glove init without its file are reported too."""
    spec = {"name": "bad name!", "retries": -1, "tasks": [{"task": "sst2", "oov": "meen"}],
            "inits": ["xavier", "xavier", "glove"]}
    with pytest.raises(SpecError) as e:
        check_spec(spec)
    found = dict(e.value.problems)
    assert {"name", "retries", "tasks[0].oov", "inits[1]", "inits[2]"} <= set(found)
    assert "duplicates inits[0]" in found["inits[1]"] and "needs a pretrained file" in found["inits[2]"]
    assert CROSS_NOT_CHECKED not in e.value.notes and e.value.notes == [SIZES_NOT_CHECKED]


def test_a_field_the_cross_checks_read_stops_them_and_says_so():
    """An invalid `pretrained` file name is not left out: glove would then look as if it had no file."""
    spec = {"name": "s", "tasks": ["sst2"], "inits": ["glove", "glove"], "pretrained": {"glove": 3}}
    with pytest.raises(SpecError) as e:
        check_spec(spec)
    assert not any("needs a pretrained file" in m for _, m in e.value.problems)
    assert CROSS_NOT_CHECKED in e.value.notes


def _found(spec) -> dict[str, str]:
    with pytest.raises(SpecError) as e:
        check_spec(spec, local=False, sizes=False)
    return dict(e.value.problems)


def test_the_analyses_reference_seed_is_checked_beside_problems_that_stop_the_other_cross_checks():
    """A reference seed no trial has was said only once an init typo (or a bad heads) was fixed: a second
    round. It reads the seeds and the similarity settings only, so it is checked beside them."""
    base = {"name": "s", "tasks": ["sst2"], "seeds": [1, 2], "analyses": {"similarity": {"reference_seed": 7}}}
    for bad in ({"inits": ["xaviar"]}, {"inits": ["xavier"], "defaults": {"heads": "abc"}}):
        found = _found({**base, **bad})
        assert "seed 7 is not one of the spec's seeds [1, 2]" in found["analyses.similarity.reference_seed"], bad
    emb = {**base, "inits": ["xaviar"], "analyses": {"similarity": {"reference_emb_seed": 7}},
           "tasks": [{"task": "sst2", "emb_seed": 5}]}
    assert "[1, 2, 5]" in _found(emb)["analyses.similarity.reference_emb_seed"]
    # an invalid entry of analyses leaves its other entry checked (the whole of analyses was set aside)
    found = _found({**base, "inits": ["xavier"], "analyses": {**base["analyses"], "probe": {"bogus": 1}}})
    assert {"analyses.probe.bogus", "analyses.similarity.reference_seed"} <= set(found)


def test_the_analyses_reference_seed_is_not_judged_against_seeds_with_problems():
    base = {"name": "s", "tasks": ["sst2"], "inits": ["xaviar"]}
    found = _found({**base, "seeds": [1, "a"], "analyses": {"similarity": {"reference_seed": 7}}})
    assert "analyses.similarity.reference_seed" not in found
    found = _found({**base, "tasks": [{"task": "sst2", "emb_seed": "x"}],
                    "analyses": {"similarity": {"reference_emb_seed": 7}}})
    assert "analyses.similarity.reference_emb_seed" not in found and "tasks[0].emb_seed" in found


def test_missing_files_and_model_sizes_of_a_valid_spec_together(tmp_path):
    (tmp_path / "g.txt").write_text("good 0.1 0.2 0.3\n")
    spec = {"name": "s", "tasks": [{"task": "sst2", "d_model": 4}], "inits": ["glove"],
            "pretrained": {"glove": str(tmp_path / "g.txt")}, "data_dir": str(tmp_path / "nodata")}
    with pytest.raises(SpecError) as e:
        check_spec(spec)
    found = dict(e.value.problems)
    assert found["data_dir"].endswith("does not exist")
    assert any("dimension 3 but the model's d_model is 4" in m for _, m in e.value.problems)
    assert e.value.notes == []


def test_dry_run_shows_every_problem_in_one_round(tmp_path, capsys):
    root = _sst2_folder(tmp_path / "data")
    (tmp_path / "s.yaml").write_text(f"name: s\ntasks: [sst2]\ninits: [xavier, xavier, glove]\nretries: -2\n"
                                     f"data_dir: {root}\npretrained: {{glove: ./glove.txt}}\n")
    assert main(["run", str(tmp_path / "s.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("embinit: error: invalid experiment spec (4 problems):\n  - retries:")
    assert "inits[1]: duplicates inits[0]" in err and "glove.txt' does not exist" in err
    assert "lacks dev.tsv" in err and err.rstrip().endswith(SIZES_NOT_CHECKED)


def test_a_folder_lacking_a_file_has_its_other_files_read_in_the_same_round(tmp_path):
    """The bad rows of the train file that is there come with the dev file that is not (they used to come
    one round later)."""
    root = _sst2_folder(tmp_path / "data")
    (root / "sst2" / "train.tsv").write_text("sentence\tlabel\ngood\t1\nno tab here\n")
    with pytest.raises(SpecError) as e:
        check_spec({"name": "s", "tasks": ["sst2"], "inits": ["xavier"], "data_dir": str(root)})
    found = dict(e.value.problems)["data_dir"]
    assert "lacks dev.tsv" in found and "train.tsv:3: expected 2 tab-separated fields" in found


def test_a_cache_dir_that_cannot_be_a_folder_is_a_problem_listed_with_the_others(tmp_path):
    """`cache_dir` need not exist (it is made on demand), but a file there, or under a file, is no folder:
    the sweep used to start, open its MLflow run and crash in Tune's storage (NotADirectoryError)."""
    (tmp_path / "afile").write_text("not a folder\n")
    base = {"name": "s", "tasks": ["synthetic_translation"], "inits": ["glove"],
            "pretrained": {"glove": str(tmp_path / "nope.txt")}}
    for cache, says in ((tmp_path / "afile", f"{str(tmp_path / 'afile')!r} is a file, not a folder"),
                        (tmp_path / "afile" / "sub", f"{str(tmp_path / 'afile' / 'sub')!r} cannot be made: "
                                                     f"{str(tmp_path / 'afile')!r} is a file, not a folder")):
        with pytest.raises(SpecError) as e:
            check_spec({**base, "cache_dir": str(cache)})
        found = dict(e.value.problems)
        assert found["cache_dir"] == says
        assert found["pretrained.glove"].endswith("does not exist")   # both in the one list
    check_spec({**base, "pretrained": {}, "inits": ["xavier"], "cache_dir": str(tmp_path / "new" / "cache")})


def test_run_refuses_a_cache_dir_file_before_opening_the_store(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    _refused_before_the_store(tmp_path, capsys, "tasks: [synthetic_translation]\ninits: [xavier]\ncache_dir: ./afile",
                              "cache_dir", "is a file, not a folder")


def _refused_before_the_store(tmp_path, capsys, spec_lines: str, field: str, *says: str) -> None:
    """`embinit run` (and its dry run) of the spec exits 2 with one problem at `field` saying each of
    `says`, and no MLflow store is made."""
    (tmp_path / "s.yaml").write_text(f"name: s\n{spec_lines}\nmlflow: {{tracking_uri: 'sqlite:///{tmp_path}/m.db'}}\n")
    for dry in ([], ["--dry-run"]):
        assert main(["run", str(tmp_path / "s.yaml"), *dry]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"embinit: error: invalid experiment spec (1 problem): {field}: ")
        assert all(text in err for text in says), err
    assert not (tmp_path / "m.db").exists()


def test_train_shows_the_oov_and_the_src_init_problems(capsys):
    assert main(["train", "--task", "sst2", "--src-init", "glove", "--oov", "meen"]) == 2
    err = capsys.readouterr().err
    assert "--oov: 'meen' is not a registered oov rule" in err
    assert "--src-init: only translation tasks have a source side" in err
    assert err.rstrip().endswith(SIZES_NOT_CHECKED)


def test_settings_no_trial_may_combine_are_checked_over_the_plan_once_per_group():
    """The trainer's rules across a trial's fields (embinit.config.config_problems) run over every planned
    trial: each problem once, naming the trials (and the axis or search values) it concerns, with the
    spec's other problems."""
    spec = {"name": "s", "retries": -1, "tasks": ["synthetic_translation", "synthetic_lm"],
            "inits": ["xavier", "normal"], "seeds": 3, "defaults": {"freeze_non_embeddings": True},
            "axes": {"train_embeddings": [True, False]},
            "search": {"method": "optuna", "num_samples": 2, "space": {"tie_embeddings": [False, True]}}}
    with pytest.raises(SpecError) as e:
        check_spec(spec, local=False)
    assert e.value.problems == [
        ("retries", "Input should be greater than or equal to 0, got -1"),
        ("trials synthetic_translation x every init (tie_embeddings=True)",
         "tie_embeddings applies to language models only; 'synthetic_translation' is a translation task"),
        ("trials synthetic_translation x every init (train_embeddings=False), "
         "synthetic_lm x every init (train_embeddings=False)",
         "train_embeddings=False with freeze_non_embeddings=True leaves nothing to train")]


def test_a_rule_on_one_task_names_its_trials_only():
    spec = {"name": "s", "tasks": [{"task": "synthetic_translation", "tie_embeddings": True},
                                   {"task": "synthetic_lm", "tie_embeddings": True}], "inits": ["xavier"]}
    with pytest.raises(SpecError) as e:
        check_spec(spec, local=False)
    assert e.value.problems == [("trials synthetic_translation x Xavier", "tie_embeddings applies to language "
                                 "models only; 'synthetic_translation' is a translation task")]
    check_spec({**spec, "tasks": spec["tasks"][1:]}, local=False)   # an LM may tie its tables


def test_run_refuses_bad_rows_in_the_data_files_before_opening_the_store(tmp_path, capsys):
    """A data folder with every file present but bad rows passed the check: the sweep started Ray, made
    the MLflow store and a FAILED trial run, and said which row only in the report's failed list."""
    folder = tmp_path / "sst2"
    folder.mkdir()
    (folder / "train.tsv").write_text("sentence\tlabel\ngood film\tpositive\nbad film\t0\nok\tx\n")
    (folder / "dev.tsv").write_text("sentence\tlabel\nfine\t1\n")
    _refused_before_the_store(tmp_path, capsys, "tasks: [{task: sst2, data_dir: ./sst2}]\ninits: [xavier]",
                              "tasks[0].data_dir", "train.tsv:2: unknown label 'positive'",
                              "train.tsv:4: unknown label 'x'")
