"""`CODE_VERSION` is bumped whenever what a trial computes changes: its trial key includes it, and a key
MLflow has finished is reused, so stale runs would be pooled with new ones under one version. The fixed
tiny trials of `tests/helpers/code_fingerprint.py` must give the numbers stored for the current version."""

from __future__ import annotations

import json

import pytest

from embinit.config import CODE_VERSION
from tests.helpers import code_fingerprint as fp

HOW = ("if the change was meant to alter what trials compute, bump CODE_VERSION in embinit/config.py and run "
       "`python -m tests.helpers.code_fingerprint --write`")


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(fp.STORED.read_text())


def test_the_stored_fingerprint_is_of_the_current_code_version(stored):
    assert stored["code_version"] == CODE_VERSION, f"the fingerprint is of version {stored['code_version']!r}: {HOW}"


def test_the_fixed_trials_compute_what_this_code_version_computed(stored):
    diff = fp.differences(stored["values"], fp.compute())
    assert not diff, "what a trial computes changed under the same CODE_VERSION:\n  " + "\n  ".join(diff) + f"\n{HOW}"


def test_a_changed_metric_definition_is_caught_and_the_writer_refuses_without_a_bump(stored, monkeypatch, tmp_path,
                                                                                     capsys):
    """The BLEU pipeline change of 01ce71b (`<unk>` kept) would have failed here: its fixed-string
    scores move by far more than the exact tolerance; a loss within a relative 1e-3 does not fail."""
    values = stored["values"]
    kept, dropped = values["bleu_pipeline"]["bleu_drop0_lc0"], values["bleu_pipeline"]["bleu_drop1_lc0"]
    assert kept != dropped
    as_before = {**values, "bleu_pipeline": {**values["bleu_pipeline"], "bleu_drop0_lc0": dropped}}
    assert fp.differences(as_before, values) == [f"bleu_pipeline: bleu_drop0_lc0 was {dropped!r}, now {kept!r}"]
    loss = values["translation"]["test/loss"]
    assert fp.differences({**values, "translation": {**values["translation"], "test/loss": loss * (1 + 5e-4)}},
                          values) == []
    assert fp.differences({**values, "translation": {**values["translation"], "test/loss": loss * 1.01}}, values)
    # the writer keeps a fingerprint whose numbers changed under the same version
    copy = tmp_path / "fp.json"
    copy.write_text(json.dumps({"code_version": CODE_VERSION, "values": as_before}))
    monkeypatch.setattr(fp, "STORED", copy)
    monkeypatch.setattr(fp, "compute", lambda: values)
    assert fp.main(["--write"]) == 2
    assert "bump CODE_VERSION" in capsys.readouterr().err
    assert json.loads(copy.read_text())["values"] == as_before
