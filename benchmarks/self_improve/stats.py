"""The statistics of the result: pass@k, intervals, paired tests, means over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence

from benchmarks.data_value.measure import mcnemar_p, wilson

__all__ = ["auc", "discordant", "mcnemar_p", "mean_interval", "pass_at", "wilson"]


def pass_at(correct: Sequence[Sequence[bool]]) -> tuple[float, float]:
    """(pass@1, pass@k) of k draws per problem: pass@1 is the mean share of right draws
    (the unbiased estimate from k draws), pass@k the share of problems with a right one."""
    if not correct:
        return (math.nan, math.nan)
    at1 = sum(sum(draws) / len(draws) for draws in correct) / len(correct)
    atk = sum(any(draws) for draws in correct) / len(correct)
    return (at1, atk)


def discordant(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int]:
    """(right only with a, right only with b) on the same problems."""
    only_a = sum(x and not y for x, y in zip(a, b, strict=True))
    only_b = sum(y and not x for x, y in zip(a, b, strict=True))
    return only_a, only_b


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t interval of the mean over seeds; with one value
    the interval is unknown (nan)."""
    from scipy import stats  # type: ignore[import-untyped]

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return (mean, math.nan, math.nan)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return (mean, mean - half, mean + half)


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The chance that a right item scores above a wrong one (ties count half): how well
    the scores tell right from wrong; nan without both kinds."""
    right = [s for s, ok in zip(scores, labels, strict=True) if ok]
    wrong = [s for s, ok in zip(scores, labels, strict=True) if not ok]
    if not right or not wrong:
        return math.nan
    wins = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    return wins / (len(right) * len(wrong))
