"""Training rows per simulated GPU-hour at the H100 shape, GenPRM against a one-pass PRM.

The setup of `benchmarks/h100_goodput.py` (its curve, problems of ~300 tokens, BG-MCTS
with k = 2 at B = 10,000, policy steps of 64-512 tokens, GenPRM analyses of 128-1,024,
trees streaming into a fixed number of slots, a virtual clock), with one change: the
policy and its PRM are two engines on ONE simulated GPU (one `ContinuousBatcher`, i.e. one
batch, one prefix cache, one KV budget), so that a GPU-hour means the same under both:

* genprm: the policy's `LoadModelEngine` and GenPRM's (the real `GenPRMScorer` client,
  analyses decoded on the GPU);
* one_pass: the policy's `LoadModelEngine` and a `LoadModelPRMEngine`
  (actors/engines/load_model_prm.py: the path's uncached tokens prefilled, one forward
  step, nothing decoded), driven by `OnePassStandIn` below: the path's lines as steps,
  the problem as the prompt, Q = the last step's value.

Both runs see the same problems, the same search config and the same policy engine; the
window's policy output tokens / B is the trees the GPU completed per second (a BG-MCTS
tree spends exactly B), and rows per GPU-hour = trees per GPU-hour x training rows per
tree.  Rows per tree come from the simulated grid at the same B (BG-MCTS's correct
trajectories + DPO pairs + step pairs per search, `grid.py`), the same under both cost
models there (the PRM's quality is held equal; what a better or worse PRM changes is the
step AUC, measured on real trees).  So the ratio of rows per GPU-hour is the ratio of
trees per GPU-hour.

Caveats: the load model's texts are filler words, so sibling steps of equal length share
prefix-cache blocks (as in h100_goodput, under both scorers); a one-pass PRM is a second
7-8B model on the GPU, whose weights the shared 400,000-token KV budget does not subtract.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from actors.config import GenPRMSettings
from actors.engines.batching import ContinuousBatcher, EngineCurve, PrefixCache
from actors.engines.load_model import LoadModelEngine
from actors.engines.load_model_prm import LoadModelPRMConfig, LoadModelPRMEngine
from actors.genprm import GenPRMScorer
from actors.policy import EnginePolicy
from benchmarks.h100_goodput import (
    ANALYSIS,
    BUDGET,
    H100,
    STEP,
    K,
    TreeStream,
    h100_engine,
    run_virtual,
)
from search import parse_search_config
from search.protocols import Generation, GenerationRequest, Score, ScoreRequest
from search.scorer_kinds import GENPRM, ScorerKindName

Scorer = ScorerKindName
CACHE_TOKENS = 400_000
GPU_HOUR_BUDGET = BUDGET  # h100_goodput's B: the grid runs it too, for rows per tree


class OnePassStandIn:
    """A one-pass scorer over a `StepScoringEngine`, enough to time one.

    TODO(lead): replace with `actors.one_pass.OnePassScorer` once merged (its step
    splitting, prompt format and node value); this keeps the defaults of
    `OnePassSettings` (lines as steps, the plain problem as prompt, Q = last step).
    """

    def __init__(self, engine: LoadModelPRMEngine) -> None:
        self.engine = engine
        self.name = engine.name

    async def score(self, request: ScoreRequest) -> Score:
        steps = [line for line in "".join(request.path).split("\n") if line.strip()]
        values = await self.engine.score_steps(request.problem, steps)
        if values.error is not None or not values.values:
            return Score(0.0, None, values.input_tokens, 0, error=values.error or "no steps")
        return Score(values.values[-1], None, values.input_tokens, 0)


class CountedPolicy:
    """The policy, counting the output tokens it generated (the search's progress)."""

    def __init__(self, policy: EnginePolicy) -> None:
        self.policy = policy
        self.name = policy.name
        self.output_tokens = 0

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        generations = await self.policy.generate(request)
        self.output_tokens += sum(g.output_tokens for g in generations)
        return generations

    async def count_tokens(self, text: str) -> int:
        return await self.policy.count_tokens(text)

    async def prompt_tokens(self, problem: str, assistant_prefix: str) -> int:
        return await self.policy.prompt_tokens(problem, assistant_prefix)


@dataclass(frozen=True)
class GpuHourSetting:
    trees: int  # trees in flight (admission off: a fixed count, as h100_goodput's "off")
    inflight: int  # in-flight expansions per tree


SETTINGS = (GpuHourSetting(64, 4), GpuHourSetting(128, 8), GpuHourSetting(256, 8))
QUICK_SETTINGS = (GpuHourSetting(64, 4),)


def _engines(
    scorer: Scorer, curve: EngineCurve, read_prefix_cache: bool = True
) -> tuple[EnginePolicy, Any, ContinuousBatcher]:
    batcher = ContinuousBatcher(curve, PrefixCache(CACHE_TOKENS, 16), 1.0)

    def engine(name: str, lengths: tuple[int, int], seed: int) -> LoadModelEngine:
        # cache_tokens 0: its own cache is replaced, both engines run on the one batcher
        built = h100_engine(curve, name, lengths, seed, cache_tokens=0)
        built.batcher = batcher
        return built

    policy = EnginePolicy(engine("policy", STEP, 1))
    if scorer == GENPRM:
        return (
            policy,
            GenPRMScorer(
                engine(GENPRM, ANALYSIS, 2), GenPRMSettings(max_analysis_tokens=ANALYSIS[1])
            ),
            batcher,
        )
    prm_config = LoadModelPRMConfig(
        model="one-pass-prm", context_length=32_768, read_prefix_cache=read_prefix_cache
    )
    prm = LoadModelPRMEngine(prm_config, step_separator="\n", batcher=batcher)
    return policy, OnePassStandIn(prm), batcher


async def _run(
    scorer: Scorer,
    setting: GpuHourSetting,
    warm_s: float,
    window_s: float,
    curve: EngineCurve,
    read_prefix_cache: bool,
) -> dict[str, Any]:
    policy, prm, batcher = _engines(scorer, curve, read_prefix_cache)
    counted = CountedPolicy(policy)
    config = parse_search_config(
        {
            "algorithm": "bg_mcts",
            "k": K,
            "step_max_tokens": STEP[1],
            "max_inflight_expansions": setting.inflight,
        }
    )
    stream = TreeStream(setting.trees, config, counted, prm)  # type: ignore[arg-type]
    stream.admit()
    loop = asyncio.get_running_loop()
    try:
        await asyncio.sleep(warm_s)
        # copies of the batcher's counters (it goes on counting in place)
        before, tokens_before, done_before = (
            replace(batcher.stats),
            counted.output_tokens,
            stream.finished,
        )
        start = loop.time()
        await asyncio.sleep(window_s)
        seconds = loop.time() - start
        after, tokens_after = replace(batcher.stats), counted.output_tokens
    finally:
        stream._stopping = True
        for task in list(stream.active):
            task.cancel()
        await asyncio.gather(*stream.active, return_exceptions=True)

    def delta(counter: str) -> float:
        return float(getattr(after, counter) - getattr(before, counter))

    policy_tokens = tokens_after - tokens_before
    return {
        "scorer": scorer,
        "trees": setting.trees,
        "inflight": setting.inflight,
        "seconds": seconds,
        "policy_tokens_per_s": policy_tokens / seconds,
        "trees_per_gpu_hour": policy_tokens / BUDGET / seconds * 3600,
        "trees_done": stream.finished - done_before,
        "decode_util": delta("decode_tokens") / (seconds * curve.ceiling_decode_tokens_per_s),
        "engine_util": delta("work_s") / seconds,
        "hit": delta("cached_prompt_tokens") / max(delta("prompt_tokens"), 1),
        "prefill_per_policy_token": delta("prefill_tokens") / max(policy_tokens, 1),
        "decode_per_policy_token": delta("decode_tokens") / max(policy_tokens, 1),
    }


def run_gpu_hour(
    scorer: Scorer,
    setting: GpuHourSetting,
    warm_s: float = 300.0,
    window_s: float = 600.0,
    curve: EngineCurve = H100,
    read_prefix_cache: bool = True,
) -> dict[str, Any]:
    """One scorer at one setting, on a virtual clock (simulated seconds, no wall time);
    `read_prefix_cache` False: the one-pass PRM computes every path whole (the cache
    written but never read, stock vLLM's default for token classification)."""
    return run_virtual(_run(scorer, setting, warm_s, window_s, curve, read_prefix_cache))


def best(results: list[dict[str, Any]], scorer: Scorer) -> dict[str, Any]:
    """The scorer's setting with the most trees per GPU-hour (its own best operating point)."""
    return max((r for r in results if r["scorer"] == scorer), key=lambda r: r["trees_per_gpu_hour"])


def gpu_hour_markdown(results: list[dict[str, Any]], rows_per_tree: float) -> str:
    lines = [
        "| PRM | trees in flight | expansions/tree | policy tok/s | trees / GPU-h "
        "| rows / GPU-h | trees done | decode util | engine util | prefix hit "
        "| prefill tok / policy tok | decode tok / policy tok |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['scorer']} | {r['trees']} | {r['inflight']} | {r['policy_tokens_per_s']:,.0f} "
            f"| {r['trees_per_gpu_hour']:,.0f} | {r['trees_per_gpu_hour'] * rows_per_tree:,.0f} "
            f"| {r['trees_done']} | {r['decode_util']:.2f} | {r['engine_util']:.2f} "
            f"| {r['hit']:.0%} | {r['prefill_per_policy_token']:.2f} "
            f"| {r['decode_per_policy_token']:.2f} |"
        )
    return "\n".join(lines)


__all__ = [
    "GPU_HOUR_BUDGET",
    "QUICK_SETTINGS",
    "SETTINGS",
    "CountedPolicy",
    "GpuHourSetting",
    "OnePassStandIn",
    "best",
    "gpu_hour_markdown",
    "run_gpu_hour",
]
