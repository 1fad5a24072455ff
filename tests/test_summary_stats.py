"""`report.rows.summarize`, the mean (σ) and 95% interval of every Table-1 row and reproduction cell, against
scipy on the inputs a study can hand it: one seed, two, equal values, negative values, non-finite ones.
No MLflow: fast."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from embinit.report.rows import summarize


@pytest.mark.parametrize("values", [[0.7, 0.8, 0.9], [20.0, 22.5], [-3.0, -1.0, -2.5, -2.0], [1e-3, 2e-3, 4e-3]])
def test_the_interval_is_students_t_on_the_sample_std(values):
    s, x = summarize(values), np.array(values)
    low, high = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))   # sem: ddof=1
    assert (s["n"], s["mean"], s["std"]) == (len(x), pytest.approx(x.mean()), pytest.approx(x.std(ddof=1)))
    assert (s["ci_low"], s["ci_high"]) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))


def test_non_finite_values_are_left_out_as_a_comparison_leaves_them_out():
    finite = summarize([0.7, 0.8, 0.9], (0.0, 1.0))
    for values in ([0.7, math.nan, 0.8, 0.9], [math.inf, 0.7, 0.8, 0.9, -math.inf]):
        assert summarize(values, (0.0, 1.0)) == finite
    assert summarize([math.nan]) == summarize([])
