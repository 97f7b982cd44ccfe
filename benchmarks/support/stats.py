"""The statistics the benchmarks report: proportions with their intervals, paired tests on
the same problems, pass@k, and means over seeds.

* `wilson`: the 95% interval of an accuracy (right answers out of problems);
* `discordant` and `mcnemar_p`: two models on the same problems, who is right alone and
  how likely that split is by chance (exact McNemar);
* `pass_at`: pass@1 and pass@k of k draws per problem;
* `mean_interval`: the mean of a figure over synthesis seeds with its Student-t interval;
* `auc`: how well scores rank right items above wrong ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: two-sided 95%


def wilson(correct: int, total: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (95% by default); (nan, nan) for no trials."""
    if total == 0:
        return (math.nan, math.nan)
    p = correct / total
    denom = 1 + z * z / total
    center = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return (center - half, center + half)


def discordant(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int]:
    """(right only with a, right only with b) on the same problems."""
    only_a = sum(x and not y for x, y in zip(a, b, strict=True))
    only_b = sum(y and not x for x, y in zip(a, b, strict=True))
    return only_a, only_b


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pairs (a right alone, b right alone)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


def pass_at(correct: Sequence[Sequence[bool]]) -> tuple[float, float]:
    """(pass@1, pass@k) of k draws per problem: pass@1 is the mean share of right draws
    (the unbiased estimate from k draws), pass@k the share of problems with a right one."""
    if not correct:
        return (math.nan, math.nan)
    at1 = sum(sum(draws) / len(draws) for draws in correct) / len(correct)
    atk = sum(any(draws) for draws in correct) / len(correct)
    return (at1, atk)


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t interval of the mean over seeds; with one value
    the interval is unknown (nan)."""
    from scipy import stats

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
