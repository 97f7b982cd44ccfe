"""Anytime curves (Figs. 2-3, 5) and per-budget markers from the nested traces.

Curves read the traces of each method's largest-budget runs: at a grid budget
x every tree is in the state of its last trace point with C_used <= x, and the
metrics are averaged over problems, then over seeds.  A curve point is plotted
at the *mean consumed tokens* of those states rather than at x, so a method
that stops spending (early stops, exhausted algorithms) ends where its
spending ends instead of running flat to B_max.

Budget-redistributed aggregation (paper App. C), for figures only: at a
nominal budget B the early-stopped instances I_stop save
R = sum_{i in I_stop} (B - B_actual,i), and the active instances I_act are
evaluated at B_adj = min(B + R / |I_act|, B_max) on their largest-budget
trace.  With no early stops R = 0 and this is the plain evaluation at B, so it
is applied to every method and changes only those whose trees stop early.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped, unused-ignore]

from pipeline.report.load import FloatArray, RunData

METRICS: tuple[str, ...] = ("accuracy", "answered_rate", "depth", "width")
_FINAL_COLUMNS = {
    "tokens": "c_used",
    "accuracy": "correct",
    "answered_rate": "answered",
    "depth": "max_depth",
    "width": "max_width",
}


def early_stopping_methods(trees: Any) -> list[str]:
    """Methods with at least one early-stopped tree (redistribution changes their figures)."""
    stopped = trees[trees["early_stopped"].astype(bool)]
    return [str(m) for m in pd.unique(stopped["method"])]


def adjusted_budgets(
    nominal: FloatArray, stopped_at: FloatArray, b_max: float
) -> tuple[npt.NDArray[np.bool_], FloatArray]:
    """App. C for one run (one method and seed) at many nominal budgets at once.

    `stopped_at[i]` is instance i's C_used at its early stop (NaN when it never
    stopped early).  Instance i counts as stopped at B when it stopped at or
    below B.  Returns (stopped mask [instances x budgets], B_adj per budget).
    """
    stopped = ~np.isnan(stopped_at)[:, None] & (stopped_at[:, None] <= nominal[None, :])
    saved = np.where(stopped, nominal[None, :] - np.nan_to_num(stopped_at)[:, None], 0.0)
    active = (~stopped).sum(axis=0)
    extra = np.divide(saved.sum(axis=0), active, out=np.zeros_like(nominal), where=active > 0)
    return stopped, np.minimum(nominal + extra, b_max)


def _mean_over_seeds(per_seed: list[dict[str, FloatArray]]) -> dict[str, FloatArray]:
    return {k: np.mean([s[k] for s in per_seed], axis=0) for k in per_seed[0]}


def anytime_curves(run: RunData, points: int = 241) -> Any:
    """One row per (method, grid budget): tokens (mean C_used) and the four METRICS.

    The grid is `points` evenly spaced budgets from 0 to the method's largest
    budget B_max, plus every nominal budget, so markers and curves meet.
    """
    trees = run.trees
    frames = []
    for method in run.methods:
        mine = trees[trees["method"] == method]
        b_max = float(mine["budget"].max())
        grid = np.union1d(np.linspace(0.0, b_max, points), mine["budget"].to_numpy(float))
        largest = mine[mine["budget"] == b_max]
        per_seed = []
        for _, run_rows in largest.groupby("seed", sort=True):
            stopped_at = np.where(
                run_rows["early_stopped"].to_numpy(bool), run_rows["c_used"].to_numpy(float), np.nan
            )
            stopped, b_adj = adjusted_budgets(grid, stopped_at, b_max)
            states = [
                # a stopped tree sits at its final state for any budget past its stop
                run.trace.state_at(int(row), np.where(stopped[i], grid, b_adj))
                for i, row in enumerate(run_rows.index)
            ]
            per_seed.append({k: np.mean([s[k] for s in states], axis=0) for k in states[0]})
        mean = _mean_over_seeds(per_seed)
        frames.append(pd.DataFrame({"method": method, "grid": grid, **mean}))
    return pd.concat(frames, ignore_index=True)


def _final_state(rows: Any) -> dict[str, FloatArray]:
    # copies: pandas' copy-on-write hands out read-only views, and these get overwritten
    return {k: np.array(rows[c], dtype=np.float64) for k, c in _FINAL_COLUMNS.items()}


def budget_markers(run: RunData) -> Any:
    """One row per (method, nominal budget): that budget's own runs, averaged like the curves.

    Methods with early stops get App. C's redistribution: stopped trees keep
    their final state; active ones are read off their largest-budget trace at
    B_adj (their own final state when that trace is missing).  Columns:
    method, budget, redistributed, tokens and the METRICS.
    """
    trees = run.trees
    redistribute = set(early_stopping_methods(trees))
    rows = []
    for method in run.methods:
        mine = trees[trees["method"] == method]
        b_max = float(mine["budget"].max())
        largest = mine[mine["budget"] == b_max]
        # row numbers index the trace; RunData keeps the trees' default RangeIndex
        keys = zip(largest["seed"], largest["problem_id"], strict=True)
        largest_row = dict(zip(keys, largest.index, strict=True))
        for budget in sorted(int(b) for b in pd.unique(mine["budget"])):
            per_seed = []
            for seed, run_rows in mine[mine["budget"] == budget].groupby("seed", sort=True):
                state = _final_state(run_rows)
                if method in redistribute:
                    stopped_at = np.where(
                        run_rows["early_stopped"].to_numpy(bool), state["tokens"], np.nan
                    )
                    stopped, b_adj = adjusted_budgets(np.array([float(budget)]), stopped_at, b_max)
                    for i, problem in enumerate(run_rows["problem_id"]):
                        source = largest_row.get((seed, problem))
                        if stopped[i, 0] or source is None:
                            continue
                        later = run.trace.state_at(int(source), b_adj)
                        for key in state:
                            state[key][i] = later[key][0]
                per_seed.append({k: np.asarray(np.mean(v)) for k, v in state.items()})
            mean = _mean_over_seeds(per_seed)
            rows.append(
                {
                    "method": method,
                    "budget": budget,
                    "redistributed": method in redistribute,
                    **{k: float(v) for k, v in mean.items()},
                }
            )
    return pd.DataFrame(rows)
