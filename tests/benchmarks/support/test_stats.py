"""benchmarks/support/stats.py against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from benchmarks.support.stats import auc, discordant, mcnemar_p, mean_interval, pass_at, wilson


def test_wilson_interval_matches_known_values() -> None:
    low, high = wilson(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    low, high = wilson(0, 10)
    assert low == pytest.approx(0.0, abs=1e-12) and round(high, 4) == 0.2775
    assert all(math.isnan(x) for x in wilson(0, 0))


def test_exact_mcnemar() -> None:
    assert mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(2, 0) == 0.5  # 2 x (1/2)^2
    assert mcnemar_p(23, 14) == pytest.approx(0.18774, abs=1e-5)
    assert mcnemar_p(14, 23) == mcnemar_p(23, 14)


def test_pass_at_one_and_k() -> None:
    at1, atk = pass_at([[True, False, False, False], [False] * 4, [True, True, False, False]])
    assert at1 == pytest.approx((0.25 + 0 + 0.5) / 3)
    assert atk == pytest.approx(2 / 3)
    assert all(math.isnan(x) for x in pass_at([]))


def test_discordant_pairs() -> None:
    assert discordant([True, True, False, False], [True, False, True, True]) == (1, 2)


def test_student_t_interval_of_three_seeds() -> None:
    mean, low, high = mean_interval([0.01, 0.03, 0.05])
    # sd 0.02, t(0.975, 2) = 4.3027, half width 4.3027 * 0.02 / sqrt(3)
    assert mean == pytest.approx(0.03)
    assert high - mean == pytest.approx(4.302653 * 0.02 / math.sqrt(3), rel=1e-5)
    assert mean - low == pytest.approx(high - mean)
    one = mean_interval([0.2])
    assert one[0] == 0.2 and math.isnan(one[1]) and math.isnan(one[2])


def test_auc_counts_right_above_wrong_and_ties_half() -> None:
    assert auc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert auc([0.1, 0.9], [True, False]) == 0.0
    assert auc([0.5, 0.5, 0.7], [True, False, False]) == pytest.approx(0.25)  # (0.5 + 0) / 2
    assert math.isnan(auc([0.3], [True]))
