"""A sweep run's page in MLflow's UI shows its report: the description (`mlflow.note.content`, which MLflow
renders as markdown) is the report's markdown, cut to MLflow's limit on a tag with a line naming report.md;
before, the page had no description and the table was one click away, in an artifact."""

from __future__ import annotations

from embinit.tracking import mlflow_store, run_writers
from embinit.tracking.run_names import NOTE_TAG

REPORT = "### x\n\n| task | init | metric |\n|---|---|---|\n| t | Xavier | test/bleu |\n"


def test_a_closed_sweep_run_s_description_is_its_report(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    exp = mlflow_store.ensure_experiment("note", uri)
    parent = run_writers.start_parent_run(exp, uri, "abc", "name: note\n", 1, run_name="note")
    run_writers.end_parent_run(parent, uri, "FINISHED", REPORT, {"planned": 1})
    assert mlflow_store.client(uri).get_run(parent).data.tags[NOTE_TAG] == REPORT
    bare = run_writers.start_parent_run(exp, uri, "abc", "name: note\n", 1, run_name="note")
    run_writers.end_parent_run(bare, uri, "FINISHED", None, {})   # no report: no description
    assert NOTE_TAG not in mlflow_store.client(uri).get_run(bare).data.tags


def test_a_long_report_is_cut_at_a_line_within_mlflow_s_limit():
    long = "".join(f"| row {i} | {'x' * 60} |\n" for i in range(300))
    note = run_writers.report_note(long)
    assert len(note) <= 8000 and note.endswith("(cut here: the whole report is this run's artifact report.md)\n")
    kept = note.split("\n\n(cut here")[0]
    assert long.startswith(kept + "\n") and kept.endswith("|")
    assert run_writers.report_note(REPORT) == REPORT
