"""A node lost at half the problems, then the rerun: what the request log saves.

On the rehearsal cluster (tests/cluster.py: head, two "GPU" nodes with the policy and
scorer replicas, a CPU node with the search actors; real raylets on one machine) a
`python -m jobs.synthesize` driver runs long trees on the load model (B = 4,000 tokens,
64-token steps; `time_scale` shrinks the GPU timing so it runs in minutes on 2 cores).
When half the problems are committed and the next trees are half way, the CPU node is
removed (its raylet and the search actors SIGKILLed mid-tree) and the driver is killed
with it (the job is lost); a replacement CPU node joins.  The run folder is then copied
twice and each copy rerun (same seeds, the committed problems skipped): once with the
request log replayed, once with `replay.enabled: false`.  Engine tokens are what the
replicas generated (policy and GenPRM scorer output tokens, the replicas' counters).

Printed: the killed run's engine tokens, what its committed trees took, so what the
unfinished trees had already spent; each rerun's engine tokens; problems exactly once;
the request log's bytes per tree node and the replay wrapper's CPU per request; last
line `replay_saved_fraction=<saved / spent by the unfinished trees>`.

    python -m benchmarks.node_loss [--problems 8] [--budget 4000] [--time-scale 0.05]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from search.scorer_kinds import GENPRM

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

REPO = Path(__file__).resolve().parents[1]


def _config(out: Path, args: argparse.Namespace, run_id: str, **extra: Any) -> dict[str, Any]:
    from tests.cluster import cluster_run_config

    engine = {
        "kind": "load_model",
        "output_tokens": args.step_tokens,
        "answer_every": 0,  # no answer ends a path early: trees spend their whole budget
        "time_scale": args.time_scale,
    }
    config = cluster_run_config(
        out,
        run_id=run_id,
        budget=args.budget,
        source={"kind": "arithmetic", "count": args.problems, "seed": 0, "max_steps": 1},
        search={"algorithm": "bg_mcts", "step_max_tokens": args.step_tokens},
        **extra,
    )
    config["policy"]["engine"] = engine
    config["scorer"]["engine"] = engine
    config["scorer"][GENPRM] = {"samples": 1, "max_analysis_tokens": args.step_tokens}
    return config


def _engine_tokens() -> dict[str, tuple[str, int]]:
    from ray import serve

    out = {}
    for app in ("policy", "scorer"):
        stats = serve.get_app_handle(app).stats.remote().result()
        out[app] = (stats["replica"], int(stats["engine_output_tokens"]))
    return out


def _spent(before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]]) -> int:
    total = 0
    for app, (replica, tokens) in after.items():
        old = before.get(app)
        total += tokens - (old[1] if old is not None and old[0] == replica else 0)
    return total


def _committed(run_dir: Path) -> int:
    from pipeline.store.run_folder import RunFolder

    try:
        return RunFolder.at(run_dir).count("trees")
    except Exception:  # nothing committed yet
        return 0


def _tree_tokens(out: Path, run_id: str) -> tuple[int, list[str]]:
    """Engine tokens of the committed trees and their problem ids."""
    from pipeline.store.run_folder import RunFolder

    folder = RunFolder.open(out, run_id)
    trees = folder.read("trees").to_pylist()
    tokens = sum(int(t["policy_output_tokens"]) + int(t["prm_output_tokens"]) for t in trees)
    return tokens, [t["problem_id"] for t in trees]


def _kill_at_half(cluster: Any, config_path: Path, run_dir: Path, problems: int) -> float:
    """Start the driver, and at half the problems lose the CPU node and the driver."""
    env = {**os.environ, "RAY_ADDRESS": cluster.cluster.address, "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen(
        [sys.executable, "-m", "jobs.synthesize", "--config", str(config_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    start = time.monotonic()
    first_log = None
    try:
        # the first wave of trees: from the first request logged to half the problems
        # committed is one tree's duration D; the kill lands D/2 into the next wave
        while _committed(run_dir) < problems // 2:
            if driver.poll() is not None:
                raise SystemExit(f"the run ended before half the problems ({driver.returncode})")
            if first_log is None and any((run_dir / "requests").glob("*/*.jsonl")):
                first_log = time.monotonic()
            time.sleep(0.1)
        tree_s = time.monotonic() - (first_log or start)
        time.sleep(tree_s / 2)
        cluster.remove(cluster.cpu[0])
    finally:
        driver.kill()  # SIGKILL: the driver dies with the node, as a lost head would
        driver.wait()
    cluster.add_cpu_node()
    return time.monotonic() - start


def _log_nodes(run_dir: Path) -> tuple[int, int]:
    """Bytes of the request logs and the tree nodes they hold (generated choices)."""
    import json

    from pipeline.store.request_log import FOLDER

    size = nodes = 0
    for path in (run_dir / FOLDER).glob("*/*.jsonl"):
        data = path.read_bytes()
        size += len(data)
        for line in data.splitlines():
            try:
                _, value = json.loads(line)
            except ValueError:
                continue
            # a generation line holds its choices as lists; a score line starts with Q
            if isinstance(value, list) and value and isinstance(value[0], list):
                nodes += len(value)
    return size, nodes


def _replay_cpu(out: Path, requests: int = 2000) -> tuple[float, float]:
    """Microseconds of CPU per request for the replay wrapper: key + record (a miss that
    is logged), and key + take (a hit), on the machine's own disk."""
    import asyncio

    from actors.progress import Counters
    from actors.replay import ReplayPolicy, tree_journal
    from pipeline.store.filesystem import open_store
    from pipeline.store.request_log import RequestLogConfig, TreeLog
    from search.protocols import FinishReason, Generation, GenerationRequest

    class Engine:
        name = "cpu-probe"

        async def generate(self, request: GenerationRequest) -> list[Generation]:
            return [Generation("word " * 64, 64, FinishReason.STOP_STRING, 300)] * request.n

        async def count_tokens(self, text: str) -> int:
            return len(text.split())

    prefix = "Step 1: " + "a reasonably long step of reasoning text " * 40
    reqs = [
        GenerationRequest("problem " * 30, prefix, 2, 64, ("\nStep",), 0.7, i)
        for i in range(requests)
    ]
    store = open_store(out / "cpu-probe")
    policy = ReplayPolicy(Engine(), Counters())

    async def pass_us() -> float:
        # the first pass records every request (misses), the second takes them (hits)
        log = await TreeLog.open(store, "probe", RequestLogConfig())
        t0 = time.process_time()
        with tree_journal(log):
            for r in reqs:
                await policy.generate(r)
        seconds = (time.process_time() - t0) / requests
        await log.close()
        return seconds * 1e6

    async def run() -> tuple[float, float]:
        return await pass_us(), await pass_us()

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--step-tokens", type=int, default=64)
    parser.add_argument("--time-scale", type=float, default=0.05)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bgmcts-node-loss"))
    args = parser.parse_args()

    import ray
    from ray import serve

    from pipeline.config import parse_run_config
    from pipeline.run.synthesis import synthesize
    from pipeline.store.run_folder import RunFolder
    from tests.cluster import rehearsal_cluster

    shutil.rmtree(args.work, ignore_errors=True)
    out = args.work / "out"
    out.mkdir(parents=True)
    killed = _config(out, args, "killed")
    config_path = args.work / "killed.yaml"
    config_path.write_text(yaml.safe_dump(killed))
    with rehearsal_cluster() as cluster:
        ray.init(address=cluster.cluster.address, log_to_driver=False)
        try:
            # the replicas first (the driver's own deploy then finds them up to date)
            from actors.serve import deploy_policy, deploy_scorer

            parsed = parse_run_config(killed)
            deploy_policy(parsed.policy)
            deploy_scorer(parsed.scorer)
            before = _engine_tokens()
            wall = _kill_at_half(cluster, config_path, out / "run=killed", args.problems)
            after_kill = _engine_tokens()
            killed_tokens = _spent(before, after_kill)
            committed_tokens, committed_ids = _tree_tokens(out, "killed")
            unfinished_spent = killed_tokens - committed_tokens
            logged, logged_nodes = _log_nodes(out / "run=killed")
            for run_id in ("replay", "no-replay"):
                shutil.copytree(out / "run=killed", out / f"run={run_id}")
            results = {}
            for run_id, enabled in (("replay", True), ("no-replay", False)):
                config = parse_run_config(_config(out, args, run_id, replay={"enabled": enabled}))
                start = _engine_tokens()
                summary = synthesize(config, progress=None)
                results[run_id] = (summary, _spent(start, _engine_tokens()))
        finally:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()

    print(
        f"killed run: {len(committed_ids)}/{args.problems} problems committed after "
        f"{wall:.0f} s; engine tokens {killed_tokens:,} (committed trees {committed_tokens:,}, "
        f"unfinished trees {unfinished_spent:,}); request log {logged:,} bytes"
    )
    print("| rerun | engine tokens | replayed requests | replayed tokens | problems once |")
    print("|---|---:|---:|---:|---|")
    for run_id, (summary, tokens) in results.items():
        ids = RunFolder.open(out, run_id).read("trees").column("problem_id").to_pylist()
        once = len(ids) == args.problems and set(Counter(ids).values()) == {1}
        print(
            f"| {run_id} | {tokens:,} | {summary.replayed_requests:,} | "
            f"{summary.replayed_tokens:,} | {once} ({len(ids)} rows, {summary.errors} errors) |"
        )
    replay_summary = results["replay"][0]
    record_us, hit_us = _replay_cpu(args.work)
    print(
        f"request log at the kill: {logged:,} bytes, {logged_nodes:,} tree nodes "
        f"({logged / max(logged_nodes, 1):,.0f} bytes per node, scores included); "
        f"{replay_summary.replayed_requests:,} requests replayed"
    )
    print(f"replay CPU per request: record {record_us:.0f} us, replay {hit_us:.0f} us")
    saved = results["no-replay"][1] - results["replay"][1]
    fraction = saved / unfinished_spent if unfinished_spent > 0 else 0.0
    print(f"engine tokens saved {saved:,} of {unfinished_spent:,} the unfinished trees had spent")
    print(f"replay_saved_fraction={fraction:.3f}")


if __name__ == "__main__":
    main()
