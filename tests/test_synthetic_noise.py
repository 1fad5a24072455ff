"""synthetic_translation's `noise` option (a spec's `extras: {noise: p}`): training targets get random words,
validation and test stay clean, and the option is part of the data's cache key and of the trial key."""

import pytest

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.tasks import load_task, synthetic
from embinit.tasks.load import plan
from embinit.train.prepare import load_data


def test_noise_replaces_training_target_words_only():
    clean, noisy = synthetic.translation(3), synthetic.translation(3, noise=0.4)
    assert clean.splits["val"] == noisy.splits["val"] and clean.splits["test"] == noisy.splits["test"]
    pairs = list(zip(clean.splits["train"], noisy.splits["train"]))
    assert all(c[0] == n[0] for c, n in pairs)  # the same source sentences
    words = [(cw, nw) for c, n in pairs for cw, nw in zip(c[1].split(), n[1].split(), strict=True)]
    changed = [cw != nw for cw, nw in words if cw != "."]
    n_targets = len(set(synthetic.LEXICON.values()) - {"."})
    # 40% of the words redrawn, 1 in n_targets of them as the same word again
    assert sum(changed) / len(changed) == pytest.approx(0.4 * (1 - 1 / n_targets), abs=0.02)
    assert all(cw == nw for cw, nw in words if cw == ".")
    assert {nw for _, nw in words} <= set(synthetic.LEXICON.values())


def test_noise_zero_is_the_task_as_before():
    assert synthetic.translation(3, noise=0.0).splits == synthetic.translation(3).splits
    assert plan("synthetic_translation", noise=0.0).key == plan("synthetic_translation").key
    assert plan("synthetic_translation", noise=0.2).key != plan("synthetic_translation").key


@pytest.mark.parametrize("task, noise, message", [
    ("synthetic_translation", 1.0, "noise must be a number in [0, 1), got 1.0"),
    ("synthetic_translation", "lots", "noise must be a number in [0, 1), got 'lots'"),
    ("synthetic_classification", 0.1, "noise is an option of synthetic_translation only"),
])
def test_bad_noise_is_named(task, noise, message):
    with pytest.raises(EmbinitError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        load_task(task, tokenizer="whitespace", cache_dir=False, noise=noise)


def test_a_trial_passes_noise_to_the_task_and_keys_on_it(tmp_path):
    cfg = TrialConfig("synthetic_translation", extras={"noise": 0.4}).resolved()
    assert cfg.key() != TrialConfig("synthetic_translation").key()
    data = load_data(cfg, "whitespace", tmp_path)
    assert data.info["loaded_from"] == "generated(seed=0, noise=0.4)"
