"""Step AUC and its DeLong interval, checked against pairwise counting by definition."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from benchmarks.scorer_value.auc import curve_markdown, learning_curve, step_auc


def pairwise_auc(values: list[float], labels: list[bool]) -> float:
    """The definition: over every (right, wrong) pair, 1 if right is higher, 1/2 if tied."""
    right = [v for v, ok in zip(values, labels, strict=True) if ok]
    wrong = [v for v, ok in zip(values, labels, strict=True) if not ok]
    wins = sum(1.0 if r > w else 0.5 if r == w else 0.0 for r, w in itertools.product(right, wrong))
    return wins / (len(right) * len(wrong))


def pairwise_delong_variance(values: list[float], labels: list[bool]) -> float:
    """DeLong's variance from its definition: placements by counting pairs."""

    def psi(r: float, w: float) -> float:
        return 1.0 if r > w else 0.5 if r == w else 0.0

    right = [v for v, ok in zip(values, labels, strict=True) if ok]
    wrong = [v for v, ok in zip(values, labels, strict=True) if not ok]
    v10 = [sum(psi(r, w) for w in wrong) / len(wrong) for r in right]
    v01 = [sum(psi(r, w) for r in right) / len(right) for w in wrong]
    return float(np.var(v10, ddof=1) / len(right) + np.var(v01, ddof=1) / len(wrong))


def test_auc_counts_pairs_with_ties_as_half() -> None:
    assert step_auc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]).auc == 1.0
    assert step_auc([0.1, 0.2, 0.9, 0.8], [True, True, False, False]).auc == 0.0
    assert step_auc([0.5, 0.5], [True, False]).auc == 0.5
    # one tie among four pairs: (0.7 vs 0.7) counts half
    assert step_auc([0.7, 0.9, 0.7, 0.1], [True, True, False, False]).auc == pytest.approx(3.5 / 4)


def test_auc_and_interval_match_the_definitions_on_random_tied_data() -> None:
    rng = random.Random(3)
    for _ in range(20):
        n = rng.randint(4, 40)
        labels = [rng.random() < 0.6 for _ in range(n)]
        labels[0], labels[1] = True, False
        # few distinct values: many ties, as saturated PRM scores have
        values = [round(rng.random() + (0.4 if ok else 0.0), 1) for ok in labels]
        got = step_auc(values, labels)
        assert got.auc == pytest.approx(pairwise_auc(values, labels))
        if got.positives > 1 and got.negatives > 1:
            half = 1.959963984540054 * math.sqrt(pairwise_delong_variance(values, labels))
            assert got.low == pytest.approx(max(0.0, got.auc - half))
            assert got.high == pytest.approx(min(1.0, got.auc + half))
        assert 0.0 <= got.low <= got.auc <= got.high <= 1.0


def test_the_interval_narrows_with_more_steps() -> None:
    rng = random.Random(0)

    def sample(n: int) -> tuple[list[float], list[bool]]:
        labels = [i % 2 == 0 for i in range(n)]
        return [rng.gauss(1.0 if ok else 0.0, 1.0) for ok in labels], labels

    small, large = step_auc(*sample(40)), step_auc(*sample(4000))
    assert large.high - large.low < (small.high - small.low) / 5
    assert large.low < 0.76 < large.high  # Phi(1/sqrt(2)) = 0.760 for these two normals


def test_bad_input_is_refused_naming_the_problem() -> None:
    with pytest.raises(ValueError, match="no wrong"):
        step_auc([0.1, 0.2], [True, True])
    with pytest.raises(ValueError, match="differ in length"):
        step_auc([0.1], [True, False])
    with pytest.raises(ValueError, match="NaN"):
        step_auc([math.nan, 0.2], [True, False])


def test_learning_curve_scores_each_row_count() -> None:
    seen: list[int] = []

    def evaluate(rows: int) -> tuple[list[float], list[bool]]:
        seen.append(rows)
        # more rows, fewer misordered pairs
        wrong_high = max(0, 4 - rows // 100)
        values = [1.0] * 4 + [0.0] * (4 - wrong_high) + [2.0] * wrong_high
        return values, [True] * 4 + [False] * 4

    points = learning_curve([0, 200, 400], evaluate)
    assert seen == [0, 200, 400]
    assert [p.auc.auc for p in points] == [0.0, 0.5, 1.0]
    table = curve_markdown(points, "one-pass")
    assert "| 200 | 0.500 |" in table
