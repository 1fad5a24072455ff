"""embinit.comparison: two inits compared on one metric (paired t on the shared seeds, Welch when none
is shared), checked against scipy, and the better / worse / inconclusive verdict that knows the metric's
direction. No MLflow: fast."""

from __future__ import annotations

import pytest
from scipy import stats

from embinit.comparison import direction, higher_is_better, paired, welch


def test_paired_on_the_shared_seeds_matches_scipy():
    a = {0: 20.0, 1: 22.0, 2: 21.5, 3: 25.0}       # seed 3 only on a's side
    b = {0: 19.0, 1: 21.5, 2: 20.0, 4: 10.0}       # seed 4 only on b's side
    c = paired(a, b)
    res = stats.ttest_rel([20.0, 22.0, 21.5], [19.0, 21.5, 20.0])
    lo, hi = res.confidence_interval(0.95)
    assert (c["test"], c["pairs"], c["n"]) == ("paired t", 3, (4, 4))
    assert c["diff"] == pytest.approx(1.0, abs=1e-14)
    assert c["diff"] - c["ci95"] == pytest.approx(lo, abs=1e-12)
    assert c["diff"] + c["ci95"] == pytest.approx(hi, abs=1e-12)


def test_welch_only_when_no_seed_is_shared():
    a, b = {0: 1.0, 1: 2.0, 2: 4.0}, {3: 3.0, 4: 5.0, 5: 6.0, 6: 8.0}
    c = paired(a, b)
    res = stats.ttest_ind([1.0, 2.0, 4.0], [3.0, 5.0, 6.0, 8.0], equal_var=False)
    lo, hi = res.confidence_interval(0.95)
    assert (c["test"], c["pairs"]) == ("Welch", 0)
    assert (c["diff"] - c["ci95"], c["diff"] + c["ci95"]) == (pytest.approx(lo, abs=1e-12),
                                                              pytest.approx(hi, abs=1e-12))
    assert welch([1.0], [2.0, 3.0])["ci95"] is None


def test_one_shared_seed_gives_a_difference_without_an_interval():
    c = paired({0: 2.0, 1: 3.0}, {0: 1.0, 2: 5.0})
    assert (c["test"], c["pairs"], c["diff"], c["ci95"]) == ("paired t", 1, 1.0, None)
    assert direction(c, "test/bleu") == "inconclusive"


def test_metric_direction():
    assert higher_is_better("test/bleu") and higher_is_better("best/val/acc_mismatched")
    assert not higher_is_better("best/val/loss") and not higher_is_better("test/ppl")


@pytest.mark.parametrize("diff, ci, metric, verdict", [
    (2.0, 1.0, "test/bleu", "better"), (-2.0, 1.0, "test/bleu", "worse"),
    (0.5, 1.0, "test/bleu", "inconclusive"), (-2.0, 1.0, "test/ppl", "better"),
    (2.0, 1.0, "best/val/loss", "worse"), (2.0, None, "test/bleu", "inconclusive")])
def test_verdicts(diff, ci, metric, verdict):
    assert direction({"diff": diff, "ci95": ci}, metric) == verdict


@pytest.mark.parametrize("metric", ["oov/test_loss", "oov/val_loss", "train/loss", "best/val/loss", "test/ppl",
                                    "wall_time_s", "best_epoch", "best/val/acc_epoch"])
def test_loss_time_and_epoch_names_are_lower_is_better(metric):
    assert not higher_is_better(metric)


@pytest.mark.parametrize("metric", ["test/bleu", "best/val/acc", "best/val/acc_matched", "tokens_per_s",
                                    "oov/coverage"])
def test_scores_are_higher_is_better(metric):
    assert higher_is_better(metric)


def test_an_interval_that_touches_zero_does_not_exclude_it():
    assert direction({"diff": 1.0, "ci95": 1.0}, "test/bleu") == "inconclusive"
    assert direction({"diff": -1.0, "ci95": 1.0}, "best/val/loss") == "inconclusive"


def test_a_split_suffix_keeps_the_metric_direction():
    """MNLI's per-split names: a loss stays lower-is-better (it is tracked and compared since the
    classifier tracks its loss), an accuracy higher-is-better."""
    assert not higher_is_better("best/val/loss_matched") and not higher_is_better("selected/val/loss_mismatched")
    assert higher_is_better("best/val/acc_matched") and higher_is_better("selected/val/acc_mismatched")
