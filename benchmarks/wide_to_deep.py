"""Prints BG-MCTS's wide-to-deep schedule on the scripted environment.

For each score distribution and algorithm: nodes created per budget third, their
mean depth and how many came through the virtual generative child, pooled over
seeds.  Backs the "What the equations do" section of docs/search.md.

    .venv/bin/python -m benchmarks.wide_to_deep [--seeds 60] [--budget 4000]
"""

from __future__ import annotations

import argparse
import asyncio

from search import parse_search_config, run_search
from search.analysis import budget_phases
from search.scripted import ScriptedPolicy, ScriptedScorer

# each row: the algorithm and the switches it runs with
RUNS: tuple[tuple[str, dict[str, bool]], ...] = (
    ("bg_mcts", {}),
    ("bg_mcts", {"widen_annealing": False}),
    ("bg_mcts", {"generative_node": False}),
    ("mcts", {}),
)
SCORES = (("uniform", 0.5), ("near_binary", 0.5), ("near_binary", 0.75))


async def _main(seeds: int, budget: int) -> None:
    print(f"B={budget}, {seeds} seeds per row, scripted policy (p_answer .15, steps 20-60 tok)\n")
    print("| scores | algorithm | depth by third | generative expansions by third |")
    print("|---|---|---|---|")
    for distribution, p_high in SCORES:
        for algorithm, switches in RUNS:
            config = parse_search_config({"algorithm": algorithm, **switches})
            results = await asyncio.gather(
                *(
                    run_search(
                        "p",
                        config,
                        ScriptedPolicy(seed=s, p_answer=0.15, step_tokens=(20, 60)),
                        ScriptedScorer(seed=s, distribution=distribution, p_high=p_high),
                        budget,
                        seed=s,
                    )
                    for s in range(seeds)
                )
            )
            phases = budget_phases(results)
            label = algorithm + "".join(f" {k}={v}" for k, v in switches.items())
            scores = distribution + (f" p_high={p_high}" if distribution != "uniform" else "")
            depth = " -> ".join(f"{p.mean_depth:.1f}" for p in phases)
            gen = " -> ".join(str(p.generative) for p in phases)
            print(f"| {scores} | {label} | {depth} | {gen} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--budget", type=int, default=4000)
    args = parser.parse_args()
    asyncio.run(_main(args.seeds, args.budget))


if __name__ == "__main__":
    main()
