"""Generated tokens per second: through the Serve handle vs. llama.cpp called directly.

Same requests, same concurrency (1, 4, 16), same engine settings: the direct
path runs `EnginePolicy(LlamaCppEngine)` in this process; the Serve path sends
the requests to a real `PolicyServer` replica on a local Ray cluster.  The
difference is the Serve layer's cost (the product's target: under 10 %).

    .venv/bin/python -m benchmarks.serve_overhead [--requests 32] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from actors.config import ServiceConfig
from actors.engines.llamacpp import LlamaCppConfig, LlamaCppEngine
from actors.policy import EnginePolicy
from search.protocols import GenerationRequest, Policy

PROBLEMS = (
    "What is 12 times 3?",
    "Natalia sold 48 clips in April and half as many in May. How many clips in total?",
    "Compute 1/2 + 1/4.",
    "How many positive divisors does 36 have?",
)


def _requests(count: int, max_tokens: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(PROBLEMS[i % len(PROBLEMS)], "Step 1:", 1, max_tokens, (), 0.8, 1000 + i)
        for i in range(count)
    ]


async def _throughput(policy: Policy, requests: list[GenerationRequest], concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(request: GenerationRequest) -> int:
        async with gate:
            return sum(g.output_tokens for g in await policy.generate(request))

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(r) for r in requests)))
    return tokens / (time.perf_counter() - start)


async def _measure(policy: Policy, args: argparse.Namespace, level: int) -> float:
    await _throughput(policy, _requests(level, args.max_tokens), level)  # warm-up
    runs = [
        await _throughput(policy, _requests(args.requests, args.max_tokens), level)
        for _ in range(args.repeats)
    ]
    return statistics.median(runs)


async def _main(args: argparse.Namespace) -> None:
    import ray

    engine_config = LlamaCppConfig(context_length=2048, parallel=16, threads=args.threads)
    levels = (1, 4, 16)
    direct_engine = LlamaCppEngine(engine_config)
    direct = {c: await _measure(EnginePolicy(direct_engine), args, c) for c in levels}
    await direct_engine.close()
    del direct_engine

    from actors.serve import deploy_policy

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    served = deploy_policy(ServiceConfig(engine=engine_config))
    via_serve = {c: await _measure(served, args, c) for c in levels}
    ray.shutdown()

    print(
        f"{args.requests} requests x {args.max_tokens} max tokens, median of {args.repeats}, "
        f"llama.cpp threads={args.threads}, SmolLM2-135M Q4_1, {os.cpu_count()} CPUs\n"
    )
    print("| concurrency | direct tok/s | Serve tok/s | Serve overhead |")
    print("|---:|---:|---:|---:|")
    for c in levels:
        overhead = 1 - via_serve[c] / direct[c]
        print(f"| {c} | {direct[c]:.1f} | {via_serve[c]:.1f} | {overhead:+.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
