"""The report's tables as long-format DataFrames (one row per method and budget).

Accounting (paper App. C, "per-instance fixed-budget evaluation"): each
(problem, budget) is its own search capped at B, and a search that stopped
early contributes its state at the stop; the tree rows already are that state,
so the tables read them as they are.  Seeds are independent runs of the whole
problem set: a statistic is computed per seed, then averaged over seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped, unused-ignore]

PERCENTILES: tuple[int, ...] = (10, 25, 50, 75, 90)
ROOT_ID = 0


def method_order(trees: Any) -> list[str]:
    """Methods in the order the grid wrote them."""
    return [str(m) for m in pd.unique(trees["method"])]


def _ordered(frame: Any, methods: Sequence[str]) -> Any:
    rank = {m: i for i, m in enumerate(methods)}
    key = frame["method"].map(rank)
    return (
        frame.assign(_rank=key)
        .sort_values(["_rank", "budget"], kind="stable")
        .drop(columns="_rank")
        .reset_index(drop=True)
    )


def accuracy_table(trees: Any) -> Any:
    """Table 1: accuracy (mean of `correct` over problems) per seed, then mean/std over seeds.

    A chosen answer whose comparison was cut off (`correct` null: unknown) counts as not
    correct, so the accuracy is a lower bound, and the report says how many there were
    (`ungraded_chosen`): not left out of the mean, nor counted wrong, without a word.

    Columns: method, budget, seeds, problems, accuracy_mean, accuracy_std
    (sample std over seeds; NaN with one seed), tokens_mean (mean C_used per
    tree), early_stop_rate (fraction of trees that stopped early).
    """
    per_seed = (
        trees.assign(
            correct=trees["correct"].eq(True).astype(float),
            early=trees["early_stopped"].astype(float),
            c_used=trees["c_used"].astype(float),
        )
        .groupby(["method", "budget", "seed"], sort=False)
        .agg(
            accuracy=("correct", "mean"),
            tokens=("c_used", "mean"),
            early=("early", "mean"),
            problems=("problem_id", "nunique"),
        )
        .reset_index()
    )
    table = (
        per_seed.groupby(["method", "budget"], sort=False)
        .agg(
            seeds=("seed", "nunique"),
            problems=("problems", "max"),
            accuracy_mean=("accuracy", "mean"),
            accuracy_std=("accuracy", "std"),
            tokens_mean=("tokens", "mean"),
            early_stop_rate=("early", "mean"),
        )
        .reset_index()
    )
    return _ordered(table, method_order(trees))


def ungraded_chosen(trees: Any) -> int:
    """Trees whose chosen answer's comparison was cut off by the grading time limit
    (`correct` null; never in an evaluation written before that was recorded)."""
    return int(trees["correct"].isna().sum())


def answered_nodes_table(trees: Any) -> Any:
    """Table 4 / data-synthesis table: answered and correct answered nodes per run.

    Node counts are summed over the problems of a seed and averaged over seeds;
    precision is mean correct / mean answered (the paper's .043 = 12.0 / 277.0),
    NaN when nothing was answered.
    """
    per_seed = (
        trees.groupby(["method", "budget", "seed"], sort=False)
        .agg(answered=("answered_nodes", "sum"), correct=("correct_nodes", "sum"))
        .reset_index()
    )
    table = (
        per_seed.groupby(["method", "budget"], sort=False)
        .agg(
            seeds=("seed", "nunique"),
            answered=("answered", "mean"),
            correct=("correct", "mean"),
        )
        .reset_index()
    )
    answered = table["answered"].astype(float)
    table["precision"] = (table["correct"].astype(float) / answered).where(answered > 0)
    return _ordered(table, method_order(trees))


def scored_nodes(nodes: Any) -> Any:
    """Nodes that carry a PRM score: not the root (the bare problem) and not failed."""
    return nodes[(nodes["node_id"] != ROOT_ID) & ~nodes["failed"].astype(bool)]


def prm_percentiles_table(nodes: Any, methods: Sequence[str] | None = None) -> Any:
    """App. K: percentiles of Q over scored nodes, per method at its largest budget.

    Pooled over seeds and problems; NumPy's default (linear) percentile.
    Columns: method, budget, nodes, p10, p25, p50, p75, p90.
    """
    columns = ["method", "budget", "nodes", *(f"p{p}" for p in PERCENTILES)]
    scored = scored_nodes(nodes)
    order = list(methods) if methods is not None else method_order(nodes)
    rows: list[dict[str, Any]] = []
    for method in order:
        mine = scored[scored["method"] == method]
        if mine.empty:
            continue
        budget = int(mine["budget"].max())
        q = mine.loc[mine["budget"] == budget, "q"].to_numpy(dtype=np.float64)
        values = np.percentile(q, PERCENTILES)
        row: dict[str, Any] = {"method": method, "budget": budget, "nodes": len(q)}
        row.update({f"p{p}": float(v) for p, v in zip(PERCENTILES, values, strict=True)})
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)
