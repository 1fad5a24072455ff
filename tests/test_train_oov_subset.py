"""The `oov/*` metrics (issue 23, item 7): validation and test loss and BLEU on the sentences whose
target holds a word the pretrained source lacks, the rows an OOV rule fills."""

from types import SimpleNamespace

import pytest
import torch
from sacrebleu.metrics import BLEU

from embinit.checkpoint_files import TEST_HYPOTHESES, TEST_REFERENCES
from embinit.config import TrialConfig
from embinit.tasks import load_task
from embinit.tasks.synthetic import LEXICON
from embinit.train import run_trial
from embinit.train.oov_subset import oov_pairs, oov_target_ids, subset_view

torch.set_num_threads(1)
WORDS = sorted(set(LEXICON.values()))
MISSING = ["boat", "horse", "lake"]   # three target nouns have no pretrained row


def write_vectors(path, words, dim=8):
    path.write_text("".join(f"{w} " + " ".join(f"{0.1 * ((i + j) % 7 - 3):.2f}" for j in range(dim)) + "\n"
                            for i, w in enumerate(words)))
    return str(path)


def test_pairs_with_an_oov_target_word_and_the_view_keeps_references_aligned():
    assert oov_pairs([([1], [4, 5]), ([9], [6]), ([2], [7, 9])], {9, 5}) == [0, 2]   # the source side never counts
    table = SimpleNamespace(oov_rows=torch.tensor([0, 1, 2, 3, 7, 12]))
    assert oov_target_ids({"src": None, "tgt": table}) == {7, 12}       # the specials do not count
    assert oov_target_ids({"tok": table}) is None
    data = SimpleNamespace(splits={"val": [([1], [4]), ([2], [5]), ([3], [6])], "train": []},
                           references={"val": ["a", "b", "c"]})
    task = SimpleNamespace(data=data, _eval_batches={"val": "stale"})
    view = subset_view(task, "val", [2, 0])
    assert view.data.splits["val"] == [([3], [6]), ([1], [4])] and view.data.references["val"] == ["c", "a"]
    assert view._eval_batches == {} and task.data.splits["val"][1] == ([2], [5])   # the task is untouched


@pytest.mark.slow   # trains two small models
def test_a_trial_with_oov_rows_reports_the_subset(tmp_path):
    kw = dict(task="synthetic_translation", threads=1, epochs=1, max_train_examples=300, init="glove+standardize",
              src_init="xavier", oov="mean", extras={"val_bleu": False})
    full = run_trial(TrialConfig(pretrained=write_vectors(tmp_path / "all.txt", WORDS), **kw), cache_dir=tmp_path)
    assert not [k for k in full.test if k.startswith("oov/")]    # nothing missing: no subset
    part = write_vectors(tmp_path / "part.txt", [w for w in WORDS if w not in MISSING])
    r = run_trial(TrialConfig(pretrained=part, **kw), out_dir=tmp_path / "trial", cache_dir=tmp_path)
    data = load_task("synthetic_translation", max_train_examples=300, cache_dir=tmp_path)
    ids = {data.vocab.index(w) for w in MISSING if w in data.vocab}
    expected = {split: sum(1 for _, t in data.splits[split] if ids.intersection(t)) for split in ("val", "test")}
    assert 0 < expected["val"] < len(data.splits["val"])
    assert r.test["oov/val_sentences"] == expected["val"] and r.test["oov/test_sentences"] == expected["test"]
    assert r.test["oov/val_loss"] != pytest.approx(r.history[-1]["val/loss"], rel=1e-6)
    assert r.test["oov/test_loss"] > 0 and 0 <= r.test["oov/test_bleu"] <= 100 and "oov/val_bleu" in r.test
    # the test outputs are the whole test split's, which test/bleu scored, not the OOV subset scored after it
    hyps = (tmp_path / "trial" / TEST_HYPOTHESES).read_text().splitlines()
    refs = (tmp_path / "trial" / TEST_REFERENCES).read_text().splitlines()
    assert len(hyps) == len(refs) == len(data.splits["test"]) > expected["test"]
    assert BLEU(lowercase=True, force=True).corpus_score(hyps, [refs]).score == pytest.approx(r.test["test/bleu"])
