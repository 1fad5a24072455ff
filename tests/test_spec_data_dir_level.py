"""A spec's `data_dir` holds one folder per task; a task's own folder goes in its entry's `data_dir` (what
`embinit train --data-dir` takes). Given one level too deep, the problem says so and names the parent
(review finding C5: it said only "data folder '.../multi30k/multi30k' (--data-dir / data_dir) is not a
folder")."""

from __future__ import annotations

import pytest

from embinit.spec import SpecError


def check_spec(*args, **kwargs):
    from embinit.spec.full_check import check_spec
    return check_spec(*args, **kwargs)


def _sst2(folder):
    folder.mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        (folder / name).write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    return folder


def _problem(spec: dict, where: str = "data_dir") -> str:
    with pytest.raises(SpecError) as e:
        check_spec(spec)
    return dict(e.value.problems)[where]


@pytest.mark.parametrize("valid", [True, False], ids=["valid spec", "spec with other problems"])
def test_the_task_folder_as_data_dir_names_its_parent_and_the_task_entry(tmp_path, valid):
    task_folder = _sst2(tmp_path / "data" / "sst2")
    spec = {"name": "s", "tasks": [{"task": "sst2"} if valid else {"task": "sst2", "epochs": 0}],
            "inits": ["xavier"], "seeds": 1, "data_dir": str(task_folder)}
    msg = _problem(spec)
    assert msg.startswith(f"sst2: data_dir {str(task_folder)!r} has no folder sst2/: a spec's data_dir is the folder "
                          f"that holds one folder per task"), msg
    assert "tasks[0].data_dir (the folder `embinit train --data-dir` takes)" in msg
    assert msg.endswith(f"{str(task_folder)!r} itself holds sst2's files: give its parent {str(tmp_path / 'data')!r} "
                        f"as data_dir, or set tasks[0].data_dir: {task_folder}")


def test_a_root_without_the_task_folder_says_what_data_dir_is(tmp_path):
    (tmp_path / "empty").mkdir()
    spec = {"name": "s", "tasks": ["sst2"], "inits": ["xavier"], "seeds": 1, "data_dir": str(tmp_path / "empty")}
    msg = _problem(spec)
    assert "holds one folder per task" in msg and "itself holds" not in msg, msg


def test_both_levels_are_accepted_where_they_belong(tmp_path):
    task_folder = _sst2(tmp_path / "data" / "sst2")
    for spec in ({"data_dir": str(tmp_path / "data"), "tasks": ["sst2"]},
                 {"tasks": [{"task": "sst2", "data_dir": str(task_folder)}]}):
        check_spec({"name": "s", "inits": ["xavier"], "seeds": 1, **spec})   # no problem


def test_glue_download_folder_names_are_named_with_the_link_to_make(tmp_path):
    """GLUE's download_glue_data.py writes glue_data/SST-2/, glue_data/MNLI/: the spec's data_dir is then
    that folder, but its task folders are not named as the tasks."""
    glue = tmp_path / "glue_data"
    _sst2(glue / "SST-2")
    spec = {"name": "s", "tasks": [{"task": "sst2"}], "inits": ["xavier"], "seeds": 1, "data_dir": str(glue)}
    msg = _problem(spec)
    assert "It holds SST-2/" in msg and f"ln -s SST-2 {glue / 'sst2'}" in msg
    assert f"tasks[0].data_dir: {glue / 'SST-2'}" in msg
    (glue / "sst2").symlink_to("SST-2")
    check_spec(spec)
