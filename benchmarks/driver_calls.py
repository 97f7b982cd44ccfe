"""Does `search/driver.py`'s `_Calls` still pay?  CPU per node on the simulated environment.

`_Calls` drives the coroutines of a batch of service calls by hand while the service
has never suspended (the simulated environment of the evaluation grid answers at
once), instead of `asyncio.gather` with a task per call.  This runs the same
simulated BG-MCTS searches (the evaluation grid's environment, `search/simulated.py`)
with the driver's `_Calls` and with a stand-in that always uses `asyncio.gather`,
interleaved, and prints the median CPU microseconds per tree node of each.  The
services of the real pipeline (Serve) always suspend, so there `_Calls` takes the
`asyncio.gather` path after the first call: only the simulated grid gains.

    .venv/bin/python -m benchmarks.driver_calls [--problems 40] [--budget 30000]
        [--reps 7]

The last line is `plain_gather_over_calls=<float>` (above 1: `_Calls` saves CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
from collections.abc import Coroutine
from typing import Any

import search.driver as driver
from search import parse_search_config, run_search
from search.simulated import SimPolicy, SimScorer, simulated_problems


class PlainGather:
    """What `_Calls` replaces: every batch through `asyncio.gather` (one call: awaited)."""

    __slots__ = ("synchronous",)

    def __init__(self) -> None:
        self.synchronous = False

    async def gather(self, coros: list[Coroutine[Any, Any, Any]]) -> list[Any]:
        if len(coros) == 1:
            return [await coros[0]]
        return list(await asyncio.gather(*coros))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--budget", type=int, default=30_000)
    parser.add_argument("--algorithm", default="bg_mcts")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()

    problems = simulated_problems(args.problems, seed=0)
    config = parse_search_config({"algorithm": args.algorithm})

    async def grid() -> int:
        nodes = 0
        for i, p in enumerate(problems):
            policy, scorer = SimPolicy(seed=i), SimScorer(seed=i)
            result = await run_search(p.problem, config, policy, scorer, args.budget, i)
            nodes += result.trace[-1].n_nodes
        return nodes

    original = driver._Calls
    per_node: dict[str, list[float]] = {"_Calls": [], "asyncio.gather": []}
    nodes = 0
    for _ in range(args.reps):
        for name, calls in (("_Calls", original), ("asyncio.gather", PlainGather)):
            driver._Calls = calls  # type: ignore[assignment, misc]
            gc.collect()
            start = time.process_time()
            nodes = asyncio.run(grid())
            per_node[name].append((time.process_time() - start) / nodes * 1e6)
    driver._Calls = original  # type: ignore[misc]
    print(
        f"{args.problems} simulated problems, {args.algorithm}, B={args.budget}, {nodes} nodes "
        f"per run, {args.reps} interleaved runs per mode; 1-min load average "
        f"{os.getloadavg()[0]:.1f} (CPU time, so other load matters less)"
    )
    for name, values in per_node.items():
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name}: median {statistics.median(values):.1f} us CPU per node (runs: {runs})")
    ratio = statistics.median(per_node["asyncio.gather"]) / statistics.median(per_node["_Calls"])
    print(f"plain_gather_over_calls={ratio:.3f}")


if __name__ == "__main__":
    main()
