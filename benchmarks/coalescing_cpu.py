"""CPU milliseconds of our processes per engine request, one request per call vs coalesced.

Model-free: the policy and the GenPRM scorer are real Serve deployments (local Ray
cluster) of the load model with a tiny latency (`--latency`, default 1 ms), so
the engine's own work is about zero and what the CPU does is the pipeline: the
search core, the Serve clients, Serve's router, the replicas, Ray's own processes.
One benchmark actor (a Ray actor, like a search actor) keeps `--trees` BG-MCTS
searches in flight (a new one starts when one ends) for `--seconds`, each inside
`tree_affinity(problem_id)` as the search actor runs it.

CPU is read from /proc for this driver and every process it started (GCS, raylet,
workers: the benchmark actor, both replicas, the Serve controller): user + system
time over the measured window, divided by the engine calls the replicas counted in
that window.  Everything is counted, the load model's few microseconds per call
and Ray's idle background included (printed separately), so the number is an upper
bound on the pipeline's cost.

Modes, same cluster, same run: `one call per request` (`coalesce_max_batch: 1`,
the path before coalescing); coalesced on 2 replicas of each deployment routed by
tree (trees hashed into `affinity_buckets_per_replica` buckets per replica, one
call per bucket), with each `--routers` entry (`even`: bucket n to replica n mod 2,
actors/routing.py; `consistent_hash`: Serve's hash ring); coalesced with each
`--linger` (the replica holding a finished result that long for others to share its
stream item); and `coalesced` (the service defaults, 1 replica).  The last lines are
`cpu_ms_per_request=<float>` for the default coalesced mode and
`cpu_ms_per_request_two_replicas=<float>` for the first `--routers` entry (the
defaults: even router, one bucket per replica).

    .venv/bin/python -m benchmarks.coalescing_cpu [--trees 64] [--seconds 15]
        [--linger 0.0005,0.002] [--routers even:1,consistent_hash:4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections import defaultdict
from typing import Any

from benchmarks.support.procstat import descendants, proc_table

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

_TICK = os.sysconf("SC_CLK_TCK")


def _role(cmdline: str) -> str:
    if "SearchBench" in cmdline:
        return "search actor"
    if "PolicyServer" in cmdline:
        return "policy replica"
    if "ScorerServer" in cmdline:
        return "scorer replica"
    if "ServeController" in cmdline:
        return "Serve controller"
    return "Ray system"  # raylet, gcs_server, agents, idle workers


def _our_cpu_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (role, user + system ticks) for this process and all its descendants."""
    table = proc_table()
    result: dict[int, tuple[str, int]] = {}
    for pid in descendants(os.getpid(), table):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        result[pid] = ("driver" if pid == os.getpid() else _role(cmd), table[pid][1])
    return result


def _cpu_seconds(
    before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]]
) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for pid, (role, ticks) in after.items():
        seconds[role] += (ticks - before.get(pid, (role, 0))[1]) / _TICK
    return dict(seconds)


class SearchBench:
    """Keeps `trees` searches in flight against the shared deployments (a search actor's loop)."""

    def __init__(self, policy_config: dict[str, Any], scorer_config: dict[str, Any]) -> None:
        from ray import serve

        from actors.config import ScorerConfig, ServiceConfig
        from actors.serve import POLICY_APP, SCORER_APP, ServePolicy, ServeScorer

        self.policy = ServePolicy(
            serve.get_app_handle(POLICY_APP), ServiceConfig.model_validate(policy_config)
        )
        self.scorer = ServeScorer(
            serve.get_app_handle(SCORER_APP), ScorerConfig.model_validate(scorer_config)
        )

    async def run(self, trees: int, seconds: float, budget: int) -> dict[str, int]:
        from actors.affinity import tree_affinity
        from search import parse_search_config, run_search

        config = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 16})
        deadline = time.monotonic() + seconds
        done = {"searches": 0, "policy_requests": 0, "scorer_requests": 0}
        counter = iter(range(10**9))

        async def one_lane() -> None:
            while time.monotonic() < deadline:
                i = next(counter)
                with tree_affinity(f"problem-{i}"):
                    result = await run_search(
                        f"What is {i} plus {i}?", config, self.policy, self.scorer, budget, seed=i
                    )
                done["searches"] += 1
                done["policy_requests"] += result.tokens.policy_requests
                done["scorer_requests"] += result.tokens.scorer_requests

        calls0 = self._calls()
        await asyncio.gather(*(one_lane() for _ in range(trees)))
        done["serve_calls"] = self._calls() - calls0
        return done

    def _calls(self) -> int:
        """Serve calls this actor made for engine requests (coalesced calls, or one each)."""
        coalesced = sum(
            c.calls for client in (self.policy, self.scorer) for c in client._coalescers.values()
        )
        return coalesced if self.policy.coalesced else -1


async def _engine_calls(replicas: int) -> int:
    """Engine calls of every replica of both apps (session keys probe each replica)."""
    from ray import serve

    from actors.serve import POLICY_APP, SCORER_APP

    total = 0
    for app in (POLICY_APP, SCORER_APP):
        handle = serve.get_app_handle(app)
        seen: dict[str, int] = {}
        for probe in range(400):
            stats = await handle.options(session_id=f"probe-{probe}").stats.remote()
            seen[stats["replica"]] = int(stats["engine_calls"])
            if len(seen) == replicas:
                break
        total += sum(seen.values())
    return total


def _measure(bench: Any, args: argparse.Namespace, replicas: int) -> dict[str, Any]:
    import ray

    ray.get(bench.run.remote(args.trees, args.warmup, args.budget))  # warm the path up
    calls0 = asyncio.run(_engine_calls(replicas))
    cpu0, t0 = _our_cpu_ticks(), time.perf_counter()
    done = ray.get(bench.run.remote(args.trees, args.seconds, args.budget))
    cpu1, t1 = _our_cpu_ticks(), time.perf_counter()
    calls = asyncio.run(_engine_calls(replicas)) - calls0
    cpu = _cpu_seconds(cpu0, cpu1)
    return {"wall": t1 - t0, "engine_calls": calls, "cpu": cpu, **done}


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trees", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--latency", type=float, default=0.001)
    parser.add_argument("--budget", type=int, default=400)
    parser.add_argument(
        "--linger", default="0.001", help="comma-separated coalesce_linger_s values to compare"
    )
    parser.add_argument(
        "--routers",
        default="even:1,consistent_hash:4",
        help="comma-separated affinity_router:affinity_buckets_per_replica (2 replicas); the "
        "first is the cpu_ms_per_request_two_replicas= figure",
    )
    return parser.parse_args()


def _modes(args: argparse.Namespace) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each mode's service overrides, in the order they run; and the 2-replica modes."""
    modes: dict[str, dict[str, Any]] = {"one call per request": {"coalesce_max_batch": 1}}
    two_replicas: list[str] = []
    for router, buckets in (r.split(":") for r in args.routers.split(",") if r):
        mode = f"coalesced, 2 replicas, {router} router, {buckets} buckets per replica"
        two_replicas.append(mode)
        modes[mode] = {
            "num_replicas": 2,
            "affinity_router": router,
            "affinity_buckets_per_replica": int(buckets),
        }
    for linger in (float(x) for x in args.linger.split(",") if x):
        modes[f"coalesced, linger {linger * 1000:g} ms"] = {"coalesce_linger_s": linger}
    modes["coalesced (defaults)"] = {}
    return modes, two_replicas


def _measure_modes(
    args: argparse.Namespace, modes: dict[str, dict[str, Any]]
) -> tuple[list[tuple[str, dict[str, Any]]], float]:
    """Every mode's measurement on one Ray cluster, and Ray's idle CPU s/s."""
    import ray

    from actors.config import ScorerConfig, ServiceConfig
    from actors.engines.load_model import LoadModelConfig
    from actors.serve import deploy_policy, deploy_scorer

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # 8 decode steps that together take --latency seconds, whatever the batch
    engine = LoadModelConfig(
        decode_base_ms=args.latency * 1000 / 8, decode_per_seq_ms=0.0, output_tokens=8
    )
    deploy_policy(ServiceConfig(engine=engine, max_ongoing_requests=1024))
    deploy_scorer(
        ScorerConfig(engine=engine, max_ongoing_requests=1024, genprm={"max_analysis_tokens": 8})
    )
    idle0, t0 = _our_cpu_ticks(), time.perf_counter()
    time.sleep(3)
    idle = sum(_cpu_seconds(idle0, _our_cpu_ticks()).values()) / (time.perf_counter() - t0)

    rows = []
    remote = ray.remote(SearchBench)
    for mode, overrides in modes.items():
        policy = ServiceConfig(engine=engine, max_ongoing_requests=1024, **overrides)
        scorer = ScorerConfig(
            engine=engine, max_ongoing_requests=1024, genprm={"max_analysis_tokens": 8}, **overrides
        )
        deploy_policy(policy)  # fresh replicas per mode (1 or 2 of each)
        deploy_scorer(scorer)
        # an actor handle: its methods are called as `bench.x.remote()`, which ray's types
        # do not describe (as the pipeline's progress board)
        bench: Any = remote.options(num_cpus=0).remote(
            policy.model_dump(mode="json"), scorer.model_dump(mode="json")
        )
        rows.append((mode, _measure(bench, args, policy.num_replicas)))
        ray.kill(bench)
    ray.shutdown()
    return rows, idle


def _print_report(
    args: argparse.Namespace,
    rows: list[tuple[str, dict[str, Any]]],
    two_replicas: list[str],
    load_before: float,
    idle: float,
) -> None:
    print(
        f"\n{args.trees} trees in flight in one actor, BG-MCTS B={args.budget}, load model "
        f"{args.latency * 1000:g} ms, {args.seconds:g} s measured per mode, {os.cpu_count()} CPUs; "
        f"1-min load average {load_before:.1f} before the run, {os.getloadavg()[0]:.1f} after "
        f"(above ~2.5 on 2 cores: other work shared the machine); Ray idle background "
        f"{idle:.3f} CPU s/s (included below)\n"
    )
    roles = (
        "search actor",
        "policy replica",
        "scorer replica",
        "Serve controller",
        "Ray system",
        "driver",
    )
    print(
        "| mode | engine requests | engine req/s | search requests | CPU s | "
        + " | ".join(roles)
        + " | search requests / Serve call | CPU ms / engine request | CPU ms / search request |"
    )
    print("|---|" + "---:|" * (7 + len(roles)))
    for mode, r in rows:
        total = sum(r["cpu"].values())
        requests = r["policy_requests"] + r["scorer_requests"]
        per_role = " | ".join(f"{r['cpu'].get(role, 0.0):.2f}" for role in roles)
        print(
            f"| {mode} | {r['engine_calls']} | {r['engine_calls'] / r['wall']:.0f} | {requests} | "
            f"{total:.2f} | {per_role} | "
            f"{requests / r['serve_calls'] if r['serve_calls'] > 0 else 1:.1f} | "
            f"{1000 * total / r['engine_calls']:.3f} | "
            f"{1000 * total / requests:.3f} |"
        )
    before, after = (sum(r["cpu"].values()) / r["engine_calls"] for _, r in (rows[0], rows[-1]))
    print(
        "\nsearch actor: the Serve clients, coalescer and search; replicas: Serve's replica "
        "machinery, the fan-out and the load model; Ray system: raylet, GCS, agents"
    )
    print(f"ratio one call per request / coalesced (defaults): {before / after:.1f}x")
    print(f"cpu_ms_per_request={1000 * after:.3f}")
    if two_replicas:
        two = dict(rows)[two_replicas[0]]
        per_request = sum(two["cpu"].values()) / two["engine_calls"]
        print(f"cpu_ms_per_request_two_replicas={1000 * per_request:.3f}")


def main() -> None:
    args = _parse_args()
    load_before = os.getloadavg()[0]
    modes, two_replicas = _modes(args)
    rows, idle = _measure_modes(args, modes)
    _print_report(args, rows, two_replicas, load_before, idle)


if __name__ == "__main__":
    main()
