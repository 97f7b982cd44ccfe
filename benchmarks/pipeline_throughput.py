"""Policy tokens per second: the real pipeline vs. the same requests replayed all at once.

1. The real pipeline (`pipeline.run.synthesis.synthesize`) runs BG-MCTS on a few bundled
   GSM8K problems with a small budget against the embedded llama.cpp
   deployments (SmolLM2-135M, as in configs/local.yaml).  The search actor is a
   subclass of `SearchActor` defined here that wraps its `ServePolicy` /
   `ServeScorer` in recorders: every policy and score request it sends is kept
   with its start and end time.  Pipeline throughput = policy output tokens
   (sum of `policy_output_tokens` over the trees) / search window (first request
   sent to last answer received).
2. The recorded policy requests are replayed all at once to the same policy
   deployment (through `ServePolicy`, so Serve is included): the deployment's
   own batched throughput on exactly that work.  With --replay-scorer the score
   requests are then replayed alone too, which shows how much of the pipeline's
   window the scorer's work on the same cores accounts for.

    .venv/bin/python -m benchmarks.pipeline_throughput [--replay-scorer]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pyarrow.parquet as pq  # type: ignore[import-untyped]

import pipeline.run.search_actor as search_actor_module
from pipeline.config import RunConfig, parse_run_config
from pipeline.run.search_actor import SearchActor
from pipeline.run.summary import RunSummary
from pipeline.run.synthesis import synthesize
from pipeline.run.wall import WallCap
from search.protocols import Generation, GenerationRequest, Score, ScoreRequest
from search.scorer_kinds import GENPRM


# ------------------------------------------------------------ recording search actor
@dataclass
class Call:
    kind: str  # "policy" or "score"
    request: GenerationRequest | ScoreRequest
    start: float  # time.time(), comparable across processes on one machine
    end: float
    output_tokens: int


class _Recorder:
    """Wraps a ServePolicy or ServeScorer; every generate / score call is kept."""

    def __init__(self, inner: Any, calls: list[tuple[Any, ...]]) -> None:
        self._inner = inner
        self._calls = calls
        self.name = inner.name

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        start = time.time()
        generations: list[Generation] = await self._inner.generate(request)
        tokens = sum(g.output_tokens for g in generations)
        self._calls.append(("policy", request, start, time.time(), tokens))
        return generations

    async def score(self, request: ScoreRequest) -> Score:
        start = time.time()
        score: Score = await self._inner.score(request)
        self._calls.append(("score", request, start, time.time(), score.output_tokens))
        return score

    def __getattr__(self, name: str) -> Any:  # count_tokens, prompt_tokens, stats
        return getattr(self._inner, name)


class RecordingSearchActor(SearchActor):
    """The real search actor, with its policy and scorer clients recorded to `log_dir`."""

    log_dir = ""  # set before the pipeline starts; pickled with the class

    def __init__(
        self, run: dict[str, Any], board: str | None = None, wall: WallCap | None = None
    ) -> None:
        super().__init__(run, board, wall)
        # plain tuples: a class defined in this script cannot be unpickled by name elsewhere
        self.calls: list[tuple[Any, ...]] = []
        self.policy = _Recorder(self.policy, self.calls)  # type: ignore[assignment]
        self.scorer = _Recorder(self.scorer, self.calls)  # type: ignore[assignment]

    async def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        out = await super().__call__(batch)
        path = Path(self.log_dir) / f"calls-{os.getpid()}.pkl"
        path.write_bytes(pickle.dumps(self.calls))
        return out


def load_calls(log_dir: Path) -> list[Call]:
    calls: list[Call] = []
    for path in sorted(log_dir.glob("calls-*.pkl")):
        calls.extend(Call(*fields) for fields in pickle.loads(path.read_bytes()))
    return sorted(calls, key=lambda c: c.start)


# -------------------------------------------------------------------------- replay
@dataclass
class Replay:
    label: str
    policy_requests: int
    score_requests: int
    policy_tokens: int
    wall_s: float
    policy_latency_s: float  # mean seconds from sending a request to its answer
    score_latency_s: float

    @property
    def rate(self) -> float:
        return self.policy_tokens / self.wall_s if self.wall_s > 0 else float("nan")


async def replay(label: str, config: RunConfig, calls: list[Call]) -> Replay:
    from ray import serve

    from actors.serve import POLICY_APP, SCORER_APP, ServePolicy, ServeScorer

    policy = ServePolicy(serve.get_app_handle(POLICY_APP), config.policy)
    scorer = ServeScorer(serve.get_app_handle(SCORER_APP), config.scorer)

    async def one(call: Call) -> Call:
        start = time.time()
        if isinstance(call.request, GenerationRequest):
            tokens = sum(g.output_tokens for g in await policy.generate(call.request))
        else:
            tokens = (await scorer.score(call.request)).output_tokens
        return Call(call.kind, call.request, start, time.time(), tokens)

    await policy.count_tokens("warm up the handle")
    start = time.perf_counter()
    done = await asyncio.gather(*(one(c) for c in calls))
    return summarize(label, done, time.perf_counter() - start)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summarize(label: str, calls: list[Call], wall_s: float) -> Replay:
    policy = [c for c in calls if c.kind == "policy"]
    score = [c for c in calls if c.kind == "score"]
    return Replay(
        label,
        len(policy),
        len(score),
        sum(c.output_tokens for c in policy),
        wall_s,
        _mean([c.end - c.start for c in policy]),
        _mean([c.end - c.start for c in score]),
    )


# ---------------------------------------------------------------------------- main
def _config(args: argparse.Namespace, root: Path) -> RunConfig:
    engine = {
        "kind": "llamacpp",
        "model": "embedded",
        "context_length": 4096,
        "threads": args.threads,
        "parallel": args.parallel,
    }
    return parse_run_config(
        {
            "run_id": "throughput",
            "output_root": str(root),
            "seed": 0,
            "budget": args.budget,
            "source": {
                "kind": "bundled",
                "dataset": "gsm8k",
                "split": "test",
                "limit": args.problems,
            },
            "search": {"algorithm": "bg_mcts", "step_max_tokens": args.step_tokens},
            "policy": {"engine": engine},
            "scorer": {
                "engine": engine,
                GENPRM: {"samples": 1, "max_analysis_tokens": args.prm_tokens},
            },
            "actors": 1,
            "trees_per_actor": args.problems,
            "ray_num_cpus": os.cpu_count() or 2,
        }
    )


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--budget", type=int, default=128, help="policy output tokens per problem")
    parser.add_argument("--step-tokens", type=int, default=32, help="step_max_tokens")
    parser.add_argument("--prm-tokens", type=int, default=16, help="GenPRM max_analysis_tokens")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads per engine")
    parser.add_argument("--parallel", type=int, default=4, help="llama.cpp slots per engine")
    parser.add_argument(
        "--replay-scorer", action="store_true", help="also replay the score requests alone"
    )
    return parser.parse_args()


@dataclass
class Measured:
    e2e_s: float  # the pipeline end to end
    tree_tokens: int  # policy tokens in the trees
    recorded_tokens: int  # policy tokens in the recorded requests
    rows: list[Replay]  # the pipeline's search window, then each replay


def _recorded_run(config: RunConfig, log_dir: str) -> tuple[RunSummary, float]:
    """The pipeline with the recording search actor: its summary and wall seconds."""
    RecordingSearchActor.log_dir = log_dir
    # synthesize() imports SearchActor from this module when it runs.
    search_actor_module.SearchActor = RecordingSearchActor  # type: ignore[misc]
    try:
        start = time.perf_counter()
        summary = synthesize(config)
        return summary, time.perf_counter() - start
    finally:
        search_actor_module.SearchActor = SearchActor  # type: ignore[misc]


def measure(args: argparse.Namespace) -> Measured:
    import ray
    from ray import serve

    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    try:
        with tempfile.TemporaryDirectory(prefix="pipeline-throughput-") as tmp:
            config = _config(args, Path(tmp))
            summary, e2e = _recorded_run(config, tmp)
            if summary.errors:
                raise SystemExit(f"{summary.errors} problems failed; see {summary.run_dir}")
            # a local folder: the run's output root is the temporary directory
            trees = pq.read_table(Path(summary.run_dir) / "trees").to_pylist()
            calls = load_calls(Path(tmp))
            policy_calls = [c for c in calls if c.kind == "policy"]
            tokens = sum(int(t["policy_output_tokens"]) for t in trees)
            recorded = sum(c.output_tokens for c in policy_calls)
            window = max(c.end for c in calls) - min(c.start for c in calls)
            pipeline = summarize("pipeline (search window)", calls, window)
            rows = [
                pipeline,
                asyncio.run(replay("replay: policy requests at once", config, policy_calls)),
            ]
            if args.replay_scorer:
                score_calls = [c for c in calls if c.kind == "score"]
                rows.append(
                    asyncio.run(replay("replay: score requests at once", config, score_calls))
                )
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
    return Measured(e2e, tokens, recorded, rows)


def _print_report(args: argparse.Namespace, measured: Measured) -> None:
    e2e, tokens, recorded = measured.e2e_s, measured.tree_tokens, measured.recorded_tokens
    rows = measured.rows
    pipeline = rows[0]
    print(
        f"\nPipeline vs deployment throughput, llama.cpp SmolLM2-135M (model 'embedded'), "
        f"{args.threads} threads and {args.parallel} slots per engine, policy and GenPRM "
        f"scorer each in its own replica, {os.cpu_count()} CPU cores.\n"
        f"BG-MCTS on {args.problems} GSM8K problems at once (trees_per_actor={args.problems}), "
        f"budget {args.budget} policy tokens, step_max_tokens {args.step_tokens}, GenPRM "
        f"max_analysis_tokens {args.prm_tokens}. Pipeline end to end {e2e:.1f}s (Ray Data, "
        f"actor start-up, grading, Parquet included); policy tokens in trees {tokens}, "
        f"in the recorded requests {recorded}.\n"
    )
    print(
        "| measurement | policy requests | score requests | policy tokens | wall s "
        "| policy tok/s | pipeline / this | mean policy request s | mean score request s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row.label} | {row.policy_requests} | {row.score_requests} | "
            f"{row.policy_tokens} | {row.wall_s:.1f} | {row.rate:.1f} | "
            f"{pipeline.rate / row.rate if row.policy_tokens else float('nan'):.2f} "
            f"| {row.policy_latency_s:.1f} "
            f"| {row.score_latency_s:.1f} |"
        )
    if len(rows) == 3:
        serial = rows[1].wall_s + rows[2].wall_s
        print(
            f"\npolicy replay + score replay, one after the other: {serial:.1f}s "
            f"(pipeline window {pipeline.wall_s:.1f}s)"
        )
    print(
        "\nThe pipeline's window also carries the GenPRM scorer's work (an analysis and a "
        "judgement llama.cpp call per scored node, on the same cores as the policy) and the "
        "searches' dependencies (a step's children are generated, then scored, before the "
        "next step is chosen), with only trees_per_actor searches to overlap; the policy "
        "replay has the cores to itself and every request at once. --replay-scorer also "
        "replays the score requests alone. Replayed prompts may hit llama.cpp's prefix "
        "cache that the pipeline run warmed."
    )


def main() -> None:
    args = _parse_args()
    _print_report(args, measure(args))


if __name__ == "__main__":
    main()
