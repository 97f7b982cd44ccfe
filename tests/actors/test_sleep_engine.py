"""The model-free sleep engine: contract checks, and one search through real Serve deployments.

Ray and Serve run for real (a local cluster); only the model is replaced by a
fixed sleep, which is what the pipeline benchmarks load-test with.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from actors.config import ScorerConfig, ServiceConfig, SleepConfig
from actors.engines.base import Completion, Engine, Sampling
from actors.engines.sleep import ANSWER_TEXT, SleepEngine
from actors.genprm import judgement_score
from actors.serve import deploy_policy, deploy_scorer
from search import SearchResult, parse_search_config, run_search
from search.protocols import FinishReason


def _complete(
    engine: SleepEngine,
    seed: int,
    max_tokens: int = 64,
    stop: tuple[str, ...] = ("\nStep",),
    top_logprobs: int = 0,
) -> Completion:
    return asyncio.run(
        engine.complete(
            "user: hi",
            Sampling(
                max_tokens=max_tokens,
                stop=stop,
                temperature=0.8,
                seed=seed,
                top_logprobs=top_logprobs,
            ),
        )
    )


def test_contract_stops_answers_and_judges() -> None:
    engine = SleepEngine(latency_s=0.0, output_tokens=12, answer_every=2)
    assert isinstance(engine, Engine)
    done = [_complete(engine, seed=s) for s in range(40)]
    stopped = [c for c in done if c.finish is FinishReason.STOP_STRING]
    answered = [c for c in done if c.finish is FinishReason.EOS]
    assert stopped and answered and len(stopped) + len(answered) == 40
    assert all(c.output_tokens == 12 and c.stop_string == "\nStep" for c in stopped)
    assert all(c.text.endswith(ANSWER_TEXT) and c.output_tokens == 12 for c in answered)
    assert _complete(engine, seed=1) == _complete(engine, seed=1)  # deterministic
    cut = _complete(engine, seed=1, max_tokens=5)
    assert cut.finish is FinishReason.LENGTH and cut.output_tokens == 5
    judged = _complete(engine, seed=3, max_tokens=1, stop=(), top_logprobs=20)
    assert judged.output_tokens == 1 and len(judged.top_logprobs[0]) == 20
    assert 0.0 < judgement_score(judged.top_logprobs[0]) < 1.0
    assert asyncio.run(engine.tokenize("a b  c\nd")) == [0, 1, 2, 3]


def test_one_search_through_serve(ray_cluster: None) -> None:
    engine = SleepConfig(latency_s=0.02, output_tokens=16)
    policy = deploy_policy(ServiceConfig(engine=engine))
    scorer = deploy_scorer(ScorerConfig(engine=engine, genprm={"max_analysis_tokens": 32}))
    config = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 64})

    async def search() -> tuple[SearchResult, float, dict[str, Any]]:
        start = time.perf_counter()
        result = await run_search("What is 6 times 7?", config, policy, scorer, 160, seed=3)
        return result, time.perf_counter() - start, await policy.stats()

    result, elapsed, stats = asyncio.run(search())
    assert result.c_used == 160 and result.stop_reason == "budget_exhausted"
    # 16 tokens per choice, 2 choices per step: about 5 steps (an answered parent's
    # continuation prompt is charged too), each one policy round trip and two
    # sequential GenPRM calls (analysis, judgement): 3 sleeps per step.
    assert 4 <= result.iterations <= 5 and elapsed >= 3 * result.iterations * 0.02
    assert result.tokens.failed_generations == result.tokens.failed_scores == 0
    assert result.answered_nodes and result.chosen_answer == "42"
    assert stats["engine_calls"] == len(result.tree) - 1  # one engine call per child
