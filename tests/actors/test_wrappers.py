"""The policy and scorer wrappers stacked as a search actor stacks them
(`pipeline.run.search_actor`): breaker over counters over request-log replay over the
engine's policy, counters over replay over the scorer.

The engines are the real model-free load models (the policy's and a GenPRM's); the
search is a real one.  No cluster:
the wrappers are plain classes a search actor builds in its own process.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors.config import ScorerConfig
from actors.engines.factory import build_engine
from actors.engines.load_model import LoadModelConfig
from actors.policy import EnginePolicy
from actors.progress import Counters, CountingPolicy, CountingScorer
from actors.replay import ReplayPolicy, ReplayScorer
from actors.scorer_kinds import build_scorer, build_scorer_engine
from actors.search_outcome import BreakerPolicy, EngineBreaker
from search import parse_search_config, run_search
from search.config import CostWeights

FAST: dict[str, Any] = {"decode_base_ms": 0.1, "decode_per_seq_ms": 0.0, "output_tokens": 8}
SEARCH = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 16})


def test_the_stack_counts_and_judges_every_answer_and_passes_the_rest_through() -> None:
    engine_policy = EnginePolicy(build_engine(LoadModelConfig(**FAST)))
    counters = Counters()
    breaker = EngineBreaker(limit=3)
    policy = BreakerPolicy(
        CountingPolicy(ReplayPolicy(engine_policy, counters), counters, CostWeights()), breaker
    )
    config = ScorerConfig.model_validate(
        {
            "kind": "genprm",
            "engine": {"kind": "load_model", **FAST},
            "genprm": {"max_analysis_tokens": 8},
        }
    )
    engine_scorer = build_scorer(config, build_scorer_engine(config))
    scorer = CountingScorer(ReplayScorer(engine_scorer, counters), counters, CostWeights())

    async def search() -> Any:
        # what the search actor reads through the stack besides generate and score
        prompt = await policy.prompt_tokens("What is 6 times 7?", "")
        return prompt, await run_search("What is 6 times 7?", SEARCH, policy, scorer, 120, seed=1)

    prompt, result = asyncio.run(search())
    assert prompt == asyncio.run(engine_policy.prompt_tokens("What is 6 times 7?", ""))
    assert (policy.name, scorer.name) == (engine_policy.name, engine_scorer.name)
    children = len(result.tree.nodes) - 1  # every node but the root came back from the policy
    assert counters.nodes == children > 0
    assert counters.prm_output_tokens == result.tokens.prm_output_tokens
    assert counters.policy_output_tokens == result.tokens.policy_output_tokens
    assert breaker.failures_in_a_row == 0 and not breaker.open
