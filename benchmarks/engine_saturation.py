"""How close the real pipeline keeps an engine to its own ceiling (the load model).

The policy and the GenPRM scorer are Serve deployments of the model-free
`load_model` engine (`actors/engines/load_model.py`): a continuous-batching engine's
timing (decode steps slowing as the batch grows, prefill of uncached tokens, an LRU
prefix cache, at most `max_seqs` sequences).  Everything else is the real pipeline
(`pipeline.run.synthesize`): a JSONL source, Ray Data, search actors, Serve handles,
GenPRM, grading, records, the Parquet sink.

Trees have varied length: every `--slow-every`-th problem carries a marker that makes
its requests stay `--slow-factor` times as many steps in the batch (a long tree).

Per setting (actors x trees_per_actor) the engines report, over the window from the
first request they saw to the last they finished:

* problems/s: problems / window;
* each engine's utilisation: its work at the ceiling's operating point (a full batch;
  `EngineCurve.work_s`) / (window / time_scale);
* ratio_to_ceiling: the busier engine's utilisation, i.e. problems/s divided by the
  problems/s the bottleneck engine could give if it always ran a full batch.

    PYTHONPATH=. .venv/bin/python benchmarks/engine_saturation.py --quick
    PYTHONPATH=. .venv/bin/python benchmarks/engine_saturation.py --trees 1,16,64 --actors 1,2
    ... --barrier: the same with main's batch barrier (the "before" numbers)

With --quick the last line is exactly `ratio_to_ceiling=<float>` for the quick setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from pipeline.config import RunConfig, parse_run_config
from pipeline.run import synthesize

SLOW_MARKER = "(a long one)"
QUICK = {"actors": 1, "trees": 48, "problems": 96}


# ------------------------------------------------ deployments that report engine stats
def _install_stats_deployments() -> None:
    """Serve deployments that also answer `engine_stats` (the load model's counters).

    `synthesize` deploys `actors.serve.PolicyServer` / `ScorerServer`; for this benchmark
    they are replaced by subclasses with one more method.  (Defined in this script, so
    Ray pickles them by value into the replicas.)
    """
    from ray import serve

    import actors.serve as services

    class PolicyWithStats(services.PolicyServer.func_or_class):  # type: ignore[name-defined, misc]
        async def engine_stats(self) -> dict[str, Any]:
            return dict(self.engine._engine.stats())

    class ScorerWithStats(services.ScorerServer.func_or_class):  # type: ignore[name-defined, misc]
        async def engine_stats(self) -> dict[str, Any]:
            return dict(self.engine._engine.stats())

    services.PolicyServer = serve.deployment(PolicyWithStats)  # type: ignore[misc, assignment]
    services.ScorerServer = serve.deployment(ScorerWithStats)  # type: ignore[misc, assignment]


def _install_batch_barrier() -> None:
    """Main's search stage before continuous trees, for the "before" numbers (--barrier).

    Each actor call took `trees_per_actor` problems and returned when its slowest tree
    ended; one call ran at a time per actor.  Copied from pipeline/run.py as it was.
    """
    import ray

    import pipeline.run

    def barrier_stage(
        items: list[dict[str, Any]], config: RunConfig, actor: type, board: str
    ) -> Any:
        return ray.data.from_items(items).map_batches(
            actor,
            fn_constructor_kwargs={"run": config.model_dump(mode="json"), "board": board},
            compute=ray.data.ActorPoolStrategy(size=config.actors),
            batch_size=config.trees_per_actor,
            num_cpus=config.actor_num_cpus,
        )

    pipeline.run.search_stage = barrier_stage  # type: ignore[assignment]


def _engine_stats() -> dict[str, dict[str, Any]]:
    from ray import serve

    from actors.serve import POLICY_APP, SCORER_APP

    return {
        role: serve.get_app_handle(app).engine_stats.remote().result()
        for role, app in (("policy", POLICY_APP), ("scorer", SCORER_APP))
    }


# -------------------------------------------------------------------- one setting
@dataclass
class Result:
    actors: int
    trees: int
    problems: int
    window_s: float
    e2e_s: float
    utilisation: dict[str, float]
    max_running: dict[str, int]
    cache_hit: dict[str, float]
    tree_wall_s: list[float]

    @property
    def problems_per_s(self) -> float:
        return self.problems / self.window_s

    @property
    def ratio(self) -> float:
        return max(self.utilisation.values())


def _problems(path: Path, count: int, slow_every: int) -> None:
    rows = []
    for i in range(count):
        long = slow_every > 0 and i % slow_every == slow_every - 1
        rows.append(
            {
                "id": f"q{i}",
                "question": f"Problem {i}{' ' + SLOW_MARKER if long else ''}: what is {i} + {i}?",
                "answer": str(2 * i),
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _config(
    args: argparse.Namespace, actors: int, trees: int, problems: int, root: Path
) -> RunConfig:
    label = f"a{actors}-t{trees}-n{problems}"
    source = root / f"problems-{label}.jsonl"
    _problems(source, problems, args.slow_every)
    engine = {
        "kind": "load_model",
        "model": f"load-{label}",  # a new config: fresh replicas, counters from zero
        "max_seqs": args.max_seqs,
        "time_scale": args.time_scale,
        "output_tokens": args.output_tokens,
        "slow_marker": SLOW_MARKER,
        "slow_factor": args.slow_factor,
    }
    return parse_run_config(
        {
            "run_id": label,
            "output_root": str(root / "out"),
            "budget": args.output_tokens * 2 * args.steps,  # n=2 choices per step
            "source": {
                "kind": "jsonl",
                "path": str(source),
                "columns": {"problem": "question", "reference": "answer", "id": "id"},
            },
            "search": {"algorithm": "bg_mcts", "step_max_tokens": 4 * args.output_tokens},
            "policy": {"engine": engine, "max_ongoing_requests": 100_000},
            "scorer": {
                "engine": engine,
                "genprm": {"max_analysis_tokens": args.output_tokens},
                "max_ongoing_requests": 100_000,
            },
            "records": {"decontamination": {"enabled": False}},
            "actors": actors,
            "trees_per_actor": trees,
            "actor_num_cpus": 0,
            "ray_num_cpus": os.cpu_count() or 2,
        }
    )


def run_setting(
    args: argparse.Namespace, actors: int, trees: int, problems: int, root: Path
) -> Result:
    config = _config(args, actors, trees, problems, root)
    start = time.perf_counter()
    summary = synthesize(config, progress=None)
    e2e = time.perf_counter() - start
    if summary.errors:
        raise SystemExit(f"{summary.errors} problems failed; see {summary.run_dir}/errors")
    stats = _engine_stats()
    first = min(s["first_arrival"] for s in stats.values())
    last = max(s["last_finish"] for s in stats.values())
    window = last - first
    scale = args.time_scale
    trees_table = pq.read_table(summary.run_dir / "trees").to_pylist()
    return Result(
        actors=actors,
        trees=trees,
        problems=summary.searched,
        window_s=window,
        e2e_s=e2e,
        utilisation={role: s["work_s"] * scale / window for role, s in stats.items()},
        max_running={role: int(s["max_running"]) for role, s in stats.items()},
        cache_hit={
            role: s["cached_prompt_tokens"] / max(s["prompt_tokens"], 1)
            for role, s in stats.items()
        },
        tree_wall_s=[float(t["wall_time_s"]) for t in trees_table],
    )


def _row(r: Result) -> str:
    walls = sorted(r.tree_wall_s)
    return (
        f"| {r.actors} | {r.trees} | {r.problems} | {r.window_s:.1f} | {r.problems_per_s:.2f} "
        f"| {r.utilisation['policy']:.2f} | {r.utilisation['scorer']:.2f} "
        f"| {r.max_running['policy']}/{r.max_running['scorer']} "
        f"| {r.cache_hit['policy']:.0%}/{r.cache_hit['scorer']:.0%} "
        f"| {statistics.median(walls):.1f}/{walls[-1]:.1f} | {r.ratio:.2f} |"
    )


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the quick setting (< 3 min)")
    parser.add_argument("--trees", type=_ints, default=[1, 4, 16, 64, 256])
    parser.add_argument("--actors", type=_ints, default=[1, 2, 4])
    parser.add_argument("--problems", type=int, default=0, help="per setting; 0: 2 waves")
    parser.add_argument("--max-seqs", type=int, default=32, help="the engines' max_seqs")
    parser.add_argument("--time-scale", type=float, default=4.0)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6, help="budget = 2 x output_tokens x steps")
    parser.add_argument("--slow-every", type=int, default=8, help="every n-th problem is long")
    parser.add_argument("--slow-factor", type=float, default=3.0)
    parser.add_argument(
        "--barrier", action="store_true", help="main's batch barrier instead of continuous trees"
    )
    args = parser.parse_args()

    import ray
    from ray import serve

    from pipeline.cluster import quiet_ray

    quiet_ray()
    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
    _install_stats_deployments()
    if args.barrier:
        _install_batch_barrier()
    if args.quick:
        settings = [(QUICK["actors"], QUICK["trees"], QUICK["problems"])]
    else:
        settings = [
            (a, t, args.problems or max(8, 2 * a * t)) for a in args.actors for t in args.trees
        ]
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="engine-saturation-") as tmp:
            for actors, trees, problems in settings:
                result = run_setting(args, actors, trees, problems, Path(tmp))
                results.append(result)
                print(_row(result), flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()

    print(
        f"\nLoad model: the cited H100 curve (step 7.4 ms + 0.051 ms per sequence, prefill "
        f"24,000 tokens/s, 400k-token prefix cache), max_seqs {args.max_seqs}, time_scale "
        f"{args.time_scale}; BG-MCTS, {args.output_tokens} tokens per completion, budget "
        f"{args.output_tokens * 2 * args.steps}; every {args.slow_every}th tree "
        f"{args.slow_factor:g}x longer; {os.cpu_count()} CPU cores; "
        f"{'batch barrier (main before)' if args.barrier else 'continuous trees'}.\n"
    )
    print(
        "| actors | trees/actor | problems | window s | problems/s | policy util "
        "| scorer util | max running p/s | prompt cache hit p/s | tree wall s median/max "
        "| ratio to ceiling |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|")
    for result in results:
        print(_row(result))
    if args.quick:
        print(f"ratio_to_ceiling={results[0].ratio:.3f}")


if __name__ == "__main__":
    main()
