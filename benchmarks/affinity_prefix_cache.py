"""Tree-affinity routing on 2 llama.cpp replicas: prompt tokens evaluated and tokens/s.

Two replicas of the policy deployment (the embedded SmolLM2-135M on llama.cpp, one
thread each) serve `--trees` BG-MCTS searches at once (budget `--budget` output
tokens each, seeded, the same searches in both modes).  Scores come from the
scripted scorer of `search.scripted` (a fixed Q per path, no model): only the
policy's prefix cache is measured here.

Siblings share their whole prompt and a child's prompt extends its parent's, so a
replica that has served a tree before finds most of the next prompt in a slot's
prefix cache.  Mode `affinity off` uses Serve's default router (requests of a tree
land on either replica); `affinity on` routes by tree (`actors.affinity`, Serve's
ConsistentHashRouter).  Each mode deploys fresh replicas (empty caches).  Numbers
are llama.cpp's own per-request timings, summed over both replicas' stats:
`prompt_n` (prompt tokens evaluated) and `cache_n` (taken from the cache).

    .venv/bin/python -m benchmarks.affinity_prefix_cache [--trees 8] [--budget 160]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

PROBLEMS = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
    "May. How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
    "How much did she earn?",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money "
    "she needs. How much more money does Betty need to buy the wallet?",
    "James writes a 3-page letter to 2 different friends twice a week. How many pages does he "
    "write a year?",
    "Mark has a garden with flowers. He planted plants of three different colors in it. Ten of "
    "them are yellow. How many flowers does Mark have if there are 80% more purple ones?",
    "Albert is wondering how much pizza he can eat in one day. He buys 2 large pizzas and 2 "
    "small pizzas. A large pizza has 16 slices and a small pizza has 8 slices. How many pieces?",
    "Ken created a care package to send to his brother. He placed a box on a scale and poured "
    "jelly beans until the weight was 2 pounds. How heavy was the box in the end?",
    "Alexis is applying for a new job and bought a new set of business clothes. She spent $30 "
    "on shirts and $46 on pants. How much did she spend?",
)


async def _replica_stats(client: Any) -> dict[str, dict[str, Any]]:
    """Every replica's stats: probe session keys until both replicas answered."""
    seen: dict[str, dict[str, Any]] = {}
    for probe in range(400):
        stats = await client.handle.options(session_id=f"probe-{probe}").stats.remote()
        seen[stats["replica"]] = stats
        if len(seen) == 2:
            return seen
    raise RuntimeError(f"only {len(seen)} replica(s) answered")


async def _mode(affinity: bool, args: argparse.Namespace) -> dict[str, Any]:
    from actors.affinity import tree_affinity
    from actors.config import LlamaCppConfig, ServiceConfig
    from actors.serve import deploy_policy
    from search import parse_search_config, run_search
    from search.scripted import ScriptedScorer

    engine = LlamaCppConfig(context_length=2048, threads=1, parallel=args.parallel)
    client = deploy_policy(ServiceConfig(engine=engine, num_replicas=2, affinity=affinity))
    config = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": args.step_tokens})
    scorer = ScriptedScorer(seed=1)

    async def one(i: int) -> int:
        with tree_affinity(f"tree-{i}"):
            result = await run_search(
                PROBLEMS[i % len(PROBLEMS)], config, client, scorer, args.budget, seed=i
            )
        return result.tokens.policy_output

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(i) for i in range(args.trees))))
    wall = time.perf_counter() - start
    stats = await _replica_stats(client)
    evaluated = sum(int(s["prompt_tokens_evaluated"]) for s in stats.values())
    cached = sum(int(s["prompt_tokens_cached"]) for s in stats.values())
    return {
        "evaluated": evaluated,
        "cached": cached,
        "calls": sum(int(s["engine_calls"]) for s in stats.values()),
        "per_replica": sorted(int(s["engine_calls"]) for s in stats.values()),
        "tokens": tokens,
        "wall": wall,
    }


def _row(affinity: bool, r: dict[str, Any]) -> str:
    total = r["evaluated"] + r["cached"]
    split = " / ".join(map(str, r["per_replica"]))
    return (
        f"| {'on' if affinity else 'off'} | {r['calls']} ({split})"
        f" | {r['evaluated']:,} | {r['cached']:,} | {r['cached'] / max(total, 1):.1%} | "
        f"{r['tokens']:,} | {r['wall']:.1f} | {r['tokens'] / r['wall']:.1f} |"
    )


async def _main(args: argparse.Namespace) -> None:
    import ray

    for attempt in range(3):  # a loaded machine can miss Ray's 30 s node start-up limit
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:
            if attempt == 2:
                raise
    print(
        f"\n{args.trees} BG-MCTS trees at once, B={args.budget}, 2 llama.cpp replicas of "
        f"SmolLM2-135M (1 thread, {args.parallel} slots each), {os.cpu_count()} CPUs "
        "(shared machine)\n"
    )
    print(
        "| affinity | engine calls (per replica) | prompt tokens evaluated | prompt tokens cached "
        "| cached share | generated tokens | wall s | tokens/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    rows = []
    for _ in range(args.repeats):
        for affinity in (False, True):
            rows.append((affinity, await _mode(affinity, args)))
            print(_row(*rows[-1]), flush=True)  # each row as soon as it is measured
    ray.shutdown()
    off = [r for a, r in rows if not a]
    on = [r for a, r in rows if a]
    evaluated = sum(r["evaluated"] for r in on) / max(sum(r["evaluated"] for r in off), 1)
    speed = sum(r["tokens"] / r["wall"] for r in on) / sum(r["tokens"] / r["wall"] for r in off)
    print(f"\nevaluated prompt tokens on/off: {evaluated:.2f}; tokens/s on/off: {speed:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trees", type=int, default=8)
    parser.add_argument("--budget", type=int, default=160)
    parser.add_argument("--step-tokens", type=int, default=32)
    parser.add_argument("--parallel", type=int, default=8, help="llama.cpp slots per replica")
    parser.add_argument("--repeats", type=int, default=1)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
