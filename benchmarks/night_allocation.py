"""Uniform B against the night allocator at the same total tokens.

Simulated world (default): each seed is one night of `--problems` simulated problems
(difficulty ~ Beta(alpha, beta)), searched by BG-MCTS at `--budget` per problem: uniform (one
tree each) against the allocator (`pipeline.run.allocation`: a probe tree, then second
trees); kept rows by the records builders, graded by the ground truth
(`pipeline.evaluation.night_allocation`).  Defaults: the held-out seeds 2-6 (settings were
chosen on seeds 0-1) and the MATH-like mix Beta(1, 2.5).

Embedded model (`--embedded WORK`): each seed is two real runs of the embedded default
(configs/local.yaml) on the same `--problems` (default 48) at B = `--budget` (default 300),
uniform and the allocator at its defaults (`benchmarks.support.night_runs`); the ratio's
intervals are over seeds (Student t) and over problems (paired bootstrap).

    .venv/bin/python -m benchmarks.night_allocation [--problems 1000] [--seeds 2 3 4 5 6]
    .venv/bin/python -m benchmarks.night_allocation --embedded /tmp/night [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from pipeline.evaluation.night_allocation import NightTally, comparison, simulate_night
from pipeline.run.allocation import AllocationConfig
from search.simulated import SimParams, simulated_problems


def simulated(args: argparse.Namespace) -> None:
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


def embedded(args: argparse.Namespace, work: Path) -> None:
    from benchmarks.support import night_runs

    work.mkdir(parents=True, exist_ok=True)
    runs = {
        arm: [night_runs.run_night(work, arm, s, args.problems, args.budget) for s in args.seeds]
        for arm in night_runs.ARMS
    }
    kind = night_runs.kinds([r for arm in runs.values() for r in arm])
    problems = sorted(kind)
    nights = [[night_runs.tally(r, kind, problems, args.budget) for r in runs[a]] for a in runs]
    lines, figures = comparison(*nights)
    low, high = night_runs.bootstrap_interval(runs, kind, args.budget)
    print(f"embedded default, {len(problems)} problems, B={args.budget}, seeds {args.seeds}")
    print("\n".join(lines))
    print(f"\npaired bootstrap over problems (95%): pairs ratio [{low:.2f}, {high:.2f}]")
    print(f"tokens_over_budget={figures['tokens_over_budget']}")
    print(f"embedded_sft_per_mtok_ratio={figures['sft_per_mtok_ratio']:.3f}")
    ratio = night_runs.pairs_ratio(*nights)
    print(f"embedded_pairs_per_mtok_ratio={ratio:.3f} [{low:.3f}, {high:.3f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedded", type=Path, metavar="WORK", help="the embedded model's runs")
    parser.add_argument("--problems", type=int)
    parser.add_argument("--budget", type=int)
    parser.add_argument("--beta", type=float, nargs=2, default=(1.0, 2.5))
    parser.add_argument("--seeds", type=int, nargs="+")
    args = parser.parse_args()
    if args.embedded:
        args.problems, args.budget = args.problems or 48, args.budget or 300
        args.seeds = args.seeds or [0, 1, 2]
        embedded(args, args.embedded)
    else:
        args.problems, args.budget = args.problems or 1000, args.budget or 10_000
        args.seeds = args.seeds or [2, 3, 4, 5, 6]
        simulated(args)


if __name__ == "__main__":
    main()
