"""`python -m benchmarks.scorer_value [--quick]`: tables (markdown), then the last lines.

The simulated parts run here (minutes; --quick well under one); the real-run parts are
`real.real_runs`, whose lines read `nan` until it is written.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.scorer_value import grid
from benchmarks.scorer_value.auc import NAN_AUC, curve_markdown
from benchmarks.scorer_value.gpu_hour import (
    GPU_HOUR_BUDGET,
    QUICK_SETTINGS,
    SETTINGS,
    best,
    gpu_hour_markdown,
    run_gpu_hour,
)
from benchmarks.scorer_value.real import RealRuns, real_runs
from search.scorer_kinds import GENPRM, ONE_PASS


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scorer_value", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="40 problems x 1 seed, one H100 setting"
    )
    parser.add_argument("--workers", type=int, default=None, help="grid processes")
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="where the real runs and checkpoints live (a rerun resumes them); default "
        "out/bench-scorer-value/<quick|full>",
    )
    parser.add_argument("--warm-s", type=float, default=None, help="H100: simulated warm-up")
    parser.add_argument("--window-s", type=float, default=None, help="H100: simulated window")
    return parser.parse_args(argv)


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4f}"


def rows_per_tree(table: object, budget: int) -> float:
    """BG-MCTS's training rows per search at `budget` on the grid (GenPRM's cost model;
    the counts are the same under both): correct trajectories + DPO pairs + step pairs."""
    import pandas as pd  # type: ignore[import-untyped, unused-ignore]

    assert isinstance(table, pd.DataFrame)
    mine = table[
        (table["cost"] == GENPRM) & (table["method"] == "bg_mcts") & (table["budget"] == budget)
    ]
    if mine.empty:
        return math.nan
    r = mine.iloc[0]
    return float((r["correct_trajectories"] + r["dpo_pairs"] + r["step_pairs"]) / r["searches"])


def last_lines(
    real: RealRuns | None, heads: Mapping[Any, Any], gpu_ratio: float, started: float
) -> None:
    """The last lines, each figure from the real runs where they measured it."""
    auc_genprm = real.step_auc_genprm if real else NAN_AUC
    auc_one_pass = real.step_auc_one_pass if real else NAN_AUC
    tokens = {
        cost: heads[cost]["prm_tokens_per_policy_token"] for cost in grid.COSTS
    }  # simulated grid, BG-MCTS at the largest budget, unless the real runs measured it
    if real is not None and real.prm_tokens_per_policy_token_genprm is not None:
        tokens[GENPRM] = real.prm_tokens_per_policy_token_genprm
    if real is not None and real.prm_tokens_per_policy_token_one_pass is not None:
        tokens[ONE_PASS] = real.prm_tokens_per_policy_token_one_pass
    # the lower of the two settings (simulated grid at the largest B, real pipeline)
    yields = {cost: heads[cost]["yield_ratio_vs_rs"] for cost in grid.COSTS}
    for cost in grid.COSTS:
        measured = real.yield_ratio_vs_rs.get(cost) if real is not None else None
        if measured is not None and not math.isnan(measured):
            print(
                f"yield ratio vs repeated sampling, {cost}: grid {yields[cost]:.4f}, "
                f"real pipeline {measured:.4f}"
            )
            yields[cost] = min(yields[cost], measured)
    largest = int(heads[GENPRM]["budget"])
    print(
        f"\nlast lines: step AUC on held-out trees (real runs); PRM tokens per policy token: "
        f"BG-MCTS on the held-out problems (real runs; computed by the engine: the CPU "
        f"engines have no prefix cache); yield ratios: the lower of the real runs and "
        f"BG-MCTS at B={largest:,} on the simulated grid; {time.monotonic() - started:.0f} s"
    )
    print(f"step_auc_genprm={_fmt(auc_genprm.auc)}")
    print(f"step_auc_one_pass={_fmt(auc_one_pass.auc)}")
    print(f"prm_tokens_per_policy_token_genprm={_fmt(tokens[GENPRM])}")
    print(f"prm_tokens_per_policy_token_one_pass={_fmt(tokens[ONE_PASS])}")
    print(f"yield_ratio_vs_rs_genprm={_fmt(yields[GENPRM])}")
    print(f"yield_ratio_vs_rs_one_pass={_fmt(yields[ONE_PASS])}")
    print(f"rows_per_gpu_hour_ratio={_fmt(gpu_ratio)}")


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    spec = grid.QUICK if args.quick else grid.FULL
    if args.workers is not None:
        spec = replace(spec, workers=args.workers)
    budgets = sorted({*spec.budgets, GPU_HOUR_BUDGET})
    spec = replace(spec, budgets=tuple(budgets))
    started = time.monotonic()

    # 1. the simulated grid under both cost models
    frame = grid.run_grid(spec)
    table = grid.yield_table(frame)
    ratios = grid.yield_ratios(table)
    print(
        f"## Data yield on the simulated grid ({spec.problems} problems x "
        f"{len(spec.seeds)} seeds; sums; /1k tot = per 1,000 policy out + PRM in + PRM out "
        "tokens; cached = PRM input a prefix cache serves)\n"
    )
    print(grid.yield_markdown(table))
    print("\n## Yield of BG-MCTS over repeated sampling (per 1k total tokens)\n")
    print(grid.ratio_markdown(ratios))
    heads = {cost: grid.headline(table, ratios, cost) for cost in grid.COSTS}

    # 2. rows per simulated GPU-hour at the H100 shape
    settings = QUICK_SETTINGS if args.quick else SETTINGS
    warm = args.warm_s if args.warm_s is not None else (150.0 if args.quick else 300.0)
    window = args.window_s if args.window_s is not None else (150.0 if args.quick else 600.0)
    results = [
        run_gpu_hour(scorer, setting, warm, window) for setting in settings for scorer in grid.COSTS
    ]
    per_tree = rows_per_tree(table, GPU_HOUR_BUDGET)
    print(
        f"\n## Training rows per simulated GPU-hour at the H100 shape (BG-MCTS, k=2, "
        f"B={GPU_HOUR_BUDGET:,}; policy and PRM on one GPU; warm-up {warm:g} s, window "
        f"{window:g} s simulated; {per_tree:.2f} rows per tree from the grid)\n"
    )
    print(gpu_hour_markdown(results, per_tree))
    best_genprm, best_one_pass = best(results, GENPRM), best(results, ONE_PASS)
    gpu_ratio = best_one_pass["trees_per_gpu_hour"] / best_genprm["trees_per_gpu_hour"]
    print(
        f"\nbest setting each: genprm {best_genprm['trees']} trees x {best_genprm['inflight']}, "
        f"one_pass {best_one_pass['trees']} x {best_one_pass['inflight']}: rows per GPU-hour "
        f"one_pass / genprm = {gpu_ratio:.2f} (rows per tree equal: the ratio of trees)"
    )

    # 3. the real-run parts
    real: RealRuns | None
    try:
        real = real_runs(args)
    except NotImplementedError as exc:
        real = None
        print(f"\nnote: step AUC lines are nan: {exc} (benchmarks/scorer_value/real.py)")
    if real is not None and real.table:
        print("\n## Real runs on the held-out problems (SmolLM2, configs/local.yaml's setup)\n")
        print(real.table)
    if real is not None and real.learning_curve:
        print("\n## One-pass PRM: step AUC against training rows\n")
        print(curve_markdown(real.learning_curve, "one-pass"))
    last_lines(real, heads, gpu_ratio, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
