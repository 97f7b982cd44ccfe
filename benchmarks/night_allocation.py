"""Uniform B against the night allocator at the same total tokens, on the simulated world.

Each seed is one night of `--problems` simulated problems (difficulty ~ Beta(alpha, beta)),
searched by BG-MCTS at `--budget` per problem: uniform (one tree each) against the allocator
(`pipeline.run.allocation`: a probe tree, then second trees); kept rows by the records
builders, graded by the ground truth (`pipeline.evaluation.night_allocation`).  Defaults: the
held-out seeds 2-6 (settings were chosen on seeds 0-1) and the MATH-like mix Beta(1, 2.5).

    .venv/bin/python -m benchmarks.night_allocation [--problems 1000] [--seeds 2 3 4 5 6]
"""

from __future__ import annotations

import argparse
import asyncio

from pipeline.evaluation.night_allocation import NightTally, comparison, simulate_night
from pipeline.run.allocation import AllocationConfig
from search.simulated import SimParams, simulated_problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=10_000)
    parser.add_argument("--beta", type=float, nargs=2, default=(1.0, 2.5))
    parser.add_argument("--seeds", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    args = parser.parse_args()
    params = SimParams(difficulty_alpha=args.beta[0], difficulty_beta=args.beta[1])
    allocation = AllocationConfig(enabled=True)
    nights: tuple[list[NightTally], list[NightTally]] = ([], [])
    for seed in args.seeds:
        problems = simulated_problems(args.problems, seed=seed, params=params)
        for arm, config in zip(nights, (None, allocation), strict=True):
            arm.append(asyncio.run(simulate_night(problems, params, args.budget, seed, config)))
        print(f"seed {seed} done", flush=True)
    lines, figures = comparison(*nights)
    print(f"{args.problems} problems, Beta{tuple(args.beta)}, B={args.budget}, seeds {args.seeds}")
    print("\n".join(lines))
    print(f"pairs_per_mtok_ratio={figures['pairs_per_mtok_ratio']:.3f}")
    print(f"sft_per_mtok_ratio={figures['sft_per_mtok_ratio']:.3f}")
    print(f"tokens_over_budget={figures['tokens_over_budget']}")


if __name__ == "__main__":
    main()
