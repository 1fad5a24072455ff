"""A trial keeps the per-example outputs its reported metric came from, in its folder (the sweep logs
them as `outputs/`): a translation trial the test hypotheses of its best checkpoint and the references,
one sentence a line, which scored again by sacrebleu give the logged BLEU exactly (so a researcher can run
sacrebleu's own significance tests on two inits' files); a classifier the dev predictions and labels
whose accuracy is the best checkpoint's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from sacrebleu.metrics import BLEU

from embinit import checkpoint_files as cf
from embinit.config import TrialConfig
from embinit.sweep.reporting import artifacts
from embinit.train import checkpoint as ckpt
from embinit.train.trial import run_trial

pytestmark = pytest.mark.slow   # trains two tiny models
OUTPUTS_ONLY = SimpleNamespace(log_checkpoint=False, log_plots=False, log_outputs=True)   # a sweep's logging settings


def _cfg(task="synthetic_translation", **kw):
    return TrialConfig(task=task, threads=1, epochs=2, max_train_examples=300, d_model=16, ff_dim=32, heads=2,
                       **kw)


def test_a_translation_trial_keeps_the_outputs_its_test_bleu_scored(tmp_path):
    out = tmp_path / "trial"
    r = run_trial(_cfg(), out_dir=out, cache_dir=tmp_path / "cache")
    hyps = (out / cf.TEST_HYPOTHESES).read_text(encoding="utf-8").splitlines()
    refs = (out / cf.TEST_REFERENCES).read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(refs) == r.info["split_sizes"]["test"] == 200
    bleu = BLEU(lowercase="case:lc" in r.bleu_signature, force=True)
    assert bleu.corpus_score(hyps, [refs]).score == pytest.approx(r.test["test/bleu"], abs=1e-9)
    assert r.bleu_signature.startswith(str(bleu.get_signature()))   # the same sacrebleu settings
    # the README's sacrebleu command reads them as they are (the same outputs twice: nothing to tell apart)
    twin = tmp_path / "twin.txt"
    twin.write_text((out / cf.TEST_HYPOTHESES).read_text(encoding="utf-8"), encoding="utf-8")
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(out / cf.TEST_REFERENCES), "-i",
                          str(out / cf.TEST_HYPOTHESES), str(twin), "--paired-bs",
                          "--paired-bs-n", "50", "-lc", "-f", "json"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    baseline, other = json.loads(cli.stdout)
    assert baseline["BLEU"]["score"] == other["BLEU"]["score"] == pytest.approx(r.test["test/bleu"], abs=1e-9)
    logged = artifacts({"history": []}, out, OUTPUTS_ONLY, "t")
    assert sorted(logged) == [("outputs", str(out / cf.TEST_HYPOTHESES)), ("outputs", str(out / cf.TEST_REFERENCES))]
    assert artifacts({"history": []}, out, SimpleNamespace(**{**vars(OUTPUTS_ONLY), "log_outputs": False}), "t") == []


def test_a_classifier_keeps_the_dev_predictions_its_selected_accuracy_counted(tmp_path):
    out = tmp_path / "trial"
    r = run_trial(_cfg("synthetic_classification"), out_dir=out, cache_dir=tmp_path / "cache")
    predictions = [int(x) for x in (out / cf.output_file("dev", "predictions")).read_text().splitlines()]
    labels = [int(x) for x in (out / cf.output_file("dev", "labels")).read_text().splitlines()]
    assert len(predictions) == len(labels) == r.info["split_sizes"]["dev"] > 0
    assert len(set(labels)) > 1 and len(set(predictions)) > 1      # not one constant line
    # the accuracy of the kept predictions is the best checkpoint's, the one the report shows
    assert sum(p == y for p, y in zip(predictions, labels)) / len(labels) == pytest.approx(r.best["val/acc"],
                                                                                          abs=1e-12)
    at_best = next(h for h in r.history if h["epoch"] == r.best_epoch)
    assert at_best["val/acc"] == r.best["val/acc"]
    logged = artifacts({"history": []}, out, OUTPUTS_ONLY, "t")
    assert [Path(p).name for _, p in logged] == ["dev_labels.txt", "dev_predictions.txt"]


def test_outputs_keep_one_sentence_a_line_and_only_their_names(tmp_path):
    assert cf.lines_text(["a b", "two\nlines", ""]) == "a b\ntwo lines\n\n"
    assert cf.lines_text(["a\r\nb\rc", "form\x0cfeed"]) == "a b c\nform\x0cfeed\n"   # kept as scored
    assert cf.lines_text(["a b", "two\nlines", ""]).splitlines() == ["a b", "two lines", ""]
    (tmp_path / cf.TEST_HYPOTHESES).write_text("old\n")
    assert ckpt.save_outputs(tmp_path, {cf.TEST_HYPOTHESES: "new\n"}) == [tmp_path / cf.TEST_HYPOTHESES]
    assert (tmp_path / cf.TEST_HYPOTHESES).read_text() == "new\n" and not list(tmp_path.glob("*.tmp"))
    with pytest.raises(ValueError, match=r"\['notes.txt'\] are not named as"):
        ckpt.save_outputs(tmp_path, {"notes.txt": "x"})
    assert not Path(tmp_path / "notes.txt").exists()
    assert cf.output_file("dev/matched x", "labels") == "dev_matched_x_labels.txt"   # a safe file name
    assert cf.is_output_file("dev_matched_predictions.txt") and not cf.is_output_file("../x_labels.txt")
    with pytest.raises(ValueError, match="output kind 'scores'"):
        cf.output_file("dev", "scores")


def test_log_outputs_is_a_spec_setting_that_keeps_old_hashes(tmp_path):
    from embinit.spec import load_spec
    data = {"name": "o", "tasks": [{"task": "synthetic_translation"}], "inits": ["xavier"], "seeds": 1}
    plain = load_spec(data)
    assert plain.mlflow.log_outputs is True and "log_outputs" not in plain.canonical()["mlflow"]
    off = load_spec({**data, "mlflow": {"log_outputs": False}})
    assert off.spec_hash() != plain.spec_hash() and load_spec(off.to_yaml()).mlflow.log_outputs is False
    assert load_spec({**data, "mlflow": {"log_outputs": True}}).spec_hash() == plain.spec_hash()
    assert [p.key for p in off.plan()] == [p.key for p in plain.plan()]   # a logging choice, not a trial's
