"""Main job.  Until the Ray pipeline lands (issue 4) it searches a few problems
with the deterministic scripted policy and scorer, concurrently on one event
loop, and prints what each search did: the search core end to end, no model.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from pydantic import ValidationError

from search import ALGORITHMS, SearchResult, parse_search_config, run_search
from search.scripted import ScriptedPolicy, ScriptedScorer

DEMO_PROBLEMS = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether in April and May?",
    "What is 12 times 3?",
    "Compute $\\frac{1}{2} + \\frac{1}{4}$.",
    "How many positive divisors does 36 have?",
)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algorithm", default="bg_mcts", choices=ALGORITHMS)
    parser.add_argument("--budget", type=int, default=10_000, help="output-token budget B")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def _row(problem: str, result: SearchResult) -> str:
    nodes = result.answered_nodes
    return (
        f"{problem[:38]:<40}{result.c_used:>8.0f}{len(result.tree):>7}{len(nodes):>9}"
        f"{result.tree.max_depth:>7}{result.tree.max_width:>7}"
        f"  {result.chosen_answer or '-':<14}{result.stop_reason}"
    )


async def _main(args: argparse.Namespace) -> int:
    try:
        config = parse_search_config({"algorithm": args.algorithm})
    except ValidationError as exc:
        print(f"error: bad search config: {exc}", file=sys.stderr)
        return 2
    policy, scorer = ScriptedPolicy(seed=args.seed), ScriptedScorer(seed=args.seed)
    print(f"{args.algorithm} on {len(DEMO_PROBLEMS)} problems, B={args.budget} tokens each")
    print("(scripted policy and scorer: the model-backed pipeline arrives with issues 3-4)")
    start = time.perf_counter()
    results = await asyncio.gather(
        *(
            run_search(p, config, policy, scorer, args.budget, seed=args.seed + i)
            for i, p in enumerate(DEMO_PROBLEMS)
        )
    )
    elapsed = time.perf_counter() - start
    print(
        f"\n{'problem':<40}{'C_used':>8}{'nodes':>7}{'answered':>9}{'depth':>7}{'width':>7}"
        f"  {'answer':<14}stop"
    )
    for problem, result in zip(DEMO_PROBLEMS, results, strict=True):
        print(_row(problem, result))
    over = [r for r in results if r.c_used > r.budget]
    print(f"\n{len(results)} searches in {elapsed:.2f}s; budget kept in every search: {not over}")
    return 0 if not over else 1


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(_main(_parse(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
