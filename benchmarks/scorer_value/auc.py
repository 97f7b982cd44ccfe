"""Step AUC: how well a PRM's step values rank right steps above wrong ones.

The AUC is the Mann-Whitney statistic over (right step, wrong step) pairs: the share of
pairs where the right step got the higher value, a tie counting half.  Its 95% interval
is DeLong's (DeLong, DeLong and Clarke-Pearson 1988, in Sun and Xu's midrank form): the
AUC's variance from each step's "placement" among the other class, no resampling, so the
interval is the same on every run.  Ranks come from pandas (average ranks for ties), the
one ranking routine the project already depends on.

`learning_curve` evaluates the AUC of PRMs trained on growing numbers of training rows:
the caller trains and scores, this module counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd  # type: ignore[import-untyped, unused-ignore]

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


@dataclass(frozen=True, slots=True)
class StepAUC:
    """An AUC with its DeLong 95% interval and the counts it came from."""

    auc: float
    low: float
    high: float
    positives: int  # right steps
    negatives: int  # wrong steps

    def __str__(self) -> str:
        return (
            f"{self.auc:.3f} [{self.low:.3f}, {self.high:.3f}] "
            f"({self.positives} right / {self.negatives} wrong steps)"
        )


NAN_AUC = StepAUC(math.nan, math.nan, math.nan, 0, 0)


def _midranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank."""
    return np.asarray(pd.Series(values).rank(method="average").to_numpy(), dtype=float)


def step_auc(values: Sequence[float], labels: Sequence[bool]) -> StepAUC:
    """The AUC of `values` for telling right steps (label True) from wrong ones.

    Needs at least one step of each class (else a ValueError naming the missing one);
    with a single step in a class the interval is the AUC itself (no variance estimate).
    """
    if len(values) != len(labels):
        raise ValueError(f"values ({len(values)}) and labels ({len(labels)}) differ in length")
    scores = np.asarray(values, dtype=float)
    truth = np.asarray(labels, dtype=bool)
    if np.isnan(scores).any():
        raise ValueError("values hold NaN: a step without a value cannot be ranked")
    x, y = scores[truth], scores[~truth]
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        missing = "right (True)" if m == 0 else "wrong (False)"
        raise ValueError(f"labels hold no {missing} step: the AUC needs both classes")
    ranks = _midranks(np.concatenate([x, y]))
    auc = float((ranks[:m].sum() - m * (m + 1) / 2) / (m * n))
    # Placements: for a right step, the share of wrong steps below it (ties half); for a
    # wrong step, the share of right steps above it.  Their variances give DeLong's.
    v_right = (ranks[:m] - _midranks(x)) / n
    v_wrong = 1.0 - (ranks[m:] - _midranks(y)) / m
    variance = 0.0
    if m > 1:
        variance += float(np.var(v_right, ddof=1)) / m
    if n > 1:
        variance += float(np.var(v_wrong, ddof=1)) / n
    half = Z95 * math.sqrt(variance)
    return StepAUC(auc, max(0.0, auc - half), min(1.0, auc + half), m, n)


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One point of a learning curve: the AUC of a PRM trained on `rows` training rows."""

    rows: int
    auc: StepAUC


Evaluate = Callable[[int], tuple[Sequence[float], Sequence[bool]]]


def learning_curve(rows: Sequence[int], evaluate: Evaluate) -> list[CurvePoint]:
    """For each number of training rows, `evaluate(rows)` trains a PRM on that many rows
    and returns its values and the right/wrong labels of held-out steps; the AUC of each.
    """
    if any(r < 0 for r in rows):
        raise ValueError(f"rows must be >= 0, got {list(rows)}")
    return [CurvePoint(r, step_auc(*evaluate(r))) for r in rows]


def curve_markdown(points: Sequence[CurvePoint], label: str) -> str:
    """A markdown table: training rows, AUC, its interval and the step counts."""
    lines = [
        f"| {label} training rows | step AUC | 95% CI (DeLong) | right / wrong steps |",
        "|---:|---:|---|---|",
    ]
    for p in points:
        a = p.auc
        lines.append(
            f"| {p.rows:,} | {a.auc:.3f} | [{a.low:.3f}, {a.high:.3f}] "
            f"| {a.positives:,} / {a.negatives:,} |"
        )
    return "\n".join(lines)


__all__ = ["NAN_AUC", "CurvePoint", "StepAUC", "curve_markdown", "learning_curve", "step_auc"]
