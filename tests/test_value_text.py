"""One rule writes an axis's or search point's value in a trial's run name and in the report: the run
name wrote a float with `.6g` (`attention_dropout=0`) where the report's row wrote `str` (`attention_dropout=0.0`),
so the same trial read differently in MLflow's run table and in Table 1 (`run_names.value_text`). The
run name's form is kept: a stored run's `embinit.cell` tag must pool with a new seed's."""

from __future__ import annotations

import json
import re

import pytest

from embinit.report.notes import row_name
from embinit.report.plots import setting_text
from embinit.spec import load_spec
from embinit.spec.planning import plan
from embinit.sweep.work import work_item

PAIR = re.compile(r"(\w+)=([^,\s\]}]+)")


def _pairs(text: str) -> dict[str, str]:
    return dict(PAIR.findall(text))


def test_a_run_name_and_the_report_row_write_each_value_alike():
    spec = load_spec({"name": "values", "tasks": [{"task": "synthetic_classification"}], "inits": ["xavier"],
                      "seeds": [0], "axes": {"attention_dropout": [0.0, 0.1], "train_embeddings": [False]},
                      "search": {"method": "grid", "space": {"lr": [1e-4, 3e-4], "epochs": [2]}}})
    seen = set()
    for p in plan(spec):
        item = work_item(spec, p)
        group = item.group()
        row = {"init": item.label, "axes": group["axes"], "point": group["point"], "setting": {}}
        named, reported = _pairs(item.run_name), _pairs(row_name(row))
        assert named == reported, (item.run_name, row_name(row))
        seen.add(named["attention_dropout"] + " " + named["lr"])
    assert seen == {"0 0.0001", "0 0.0003", "0.1 0.0001", "0.1 0.0003"}


@pytest.mark.parametrize("value, text", [
    (0.0, "0"), (1.0, "1"), (-2.0, "-2"), (0.1, "0.1"), (1e-4, "0.0001"), (3e-4, "0.0003"), (1e-5, "1e-05"),
    (0.000123456789, "0.000123457"), (0, "0"), (3, "3"), (True, "True"), (False, "False"), ("mean", "mean")])
def test_one_value_reads_the_same_in_a_name_a_row_and_a_setting(value, text):
    from embinit.tracking.run_names import trial_run_name
    assert trial_run_name("Xavier", 0, {"x": value}) == f"Xavier-s0 x={text}"
    assert row_name({"init": "Xavier", "axes": {"x": value}, "point": {"y": value}, "setting": {}}) == \
        f"Xavier x={text} [y={text}]"
    assert setting_text(json.dumps({"z": value})) == f" {{z={text}}}"


def test_run_names_and_cell_tags_read_as_they_did_before():
    """A run stored by an earlier version and a new seed of the same cell carry one `embinit.cell` tag (the
    forms below are those of ce81ae3's run names)."""
    from embinit.tracking.run_names import trial_cell, trial_run_name
    axes = {"dropout": 0.0, "lr": 0.0003, "train_embeddings": False, "heads": 4}
    assert trial_run_name("GloVe", 1, axes) == "GloVe-s1 dropout=0,lr=0.0003,train_embeddings=False,heads=4"
    assert trial_cell("multi30k", "GloVe", axes, {"lr": 0.000123456789}) == \
        "GloVe dropout=0,lr=0.000123457,train_embeddings=False,heads=4 (multi30k)"
