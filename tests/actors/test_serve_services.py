"""The policy and GenPRM Serve deployments on a real local Ray cluster with real SmolLM2.

Nothing here is faked: Ray, Serve, llama.cpp and the 135M model all run for real.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from actors.config import ScorerConfig, ServiceConfig
from actors.engines.llamacpp import LlamaCppConfig
from actors.errors import EngineError
from actors.serve import ServePolicy, ServeScorer, deploy_policy, deploy_scorer
from search import parse_search_config, run_search
from search.protocols import FinishReason, GenerationRequest, ScoreRequest

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

ENGINE = LlamaCppConfig(context_length=2048, threads=1, parallel=4)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def policy(ray_cluster: None) -> AsyncIterator[ServePolicy]:
    yield deploy_policy(ServiceConfig(engine=ENGINE))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scorer(ray_cluster: None) -> AsyncIterator[ServeScorer]:
    config = ScorerConfig(engine=ENGINE, genprm={"max_analysis_tokens": 32})
    yield deploy_scorer(config)


def _request(**kw: Any) -> GenerationRequest:
    base: dict[str, Any] = {
        "problem": "What is 12 times 3?",
        "assistant_prefix": "Step 1:",
        "n": 4,
        "max_tokens": 96,
        "stop": ("\nStep",),
        "temperature": 0.8,
        "seed": 7,
    }
    base.update(kw)
    return GenerationRequest(**base)


async def test_stop_string_ends_a_step_and_token_counts_match(policy: ServePolicy) -> None:
    generations = await policy.generate(_request())
    assert len(generations) == 4
    boundary = await policy.count_tokens("\nStep")
    for g in generations:
        assert "\nStep" not in g.text
        counted = await policy.count_tokens(g.text)
        if g.finish is FinishReason.STOP_STRING:
            # the engine generated the boundary too; it is charged, not kept in the text
            assert g.output_tokens == await policy.count_tokens(g.text + "\nStep")
            assert g.output_tokens <= counted + boundary
        elif g.finish is FinishReason.EOS:
            assert g.output_tokens == counted + 1  # the end-of-sequence token
        else:
            assert g.finish is FinishReason.LENGTH and g.output_tokens == counted == 96
    assert any(g.finish is FinishReason.STOP_STRING for g in generations)


async def test_natural_end_of_sequence_is_detected(policy: ServePolicy) -> None:
    generations = await policy.generate(_request(stop=(), max_tokens=400, n=4))
    assert any(g.finish is FinishReason.EOS for g in generations), [g.finish for g in generations]


async def test_same_seed_same_text(policy: ServePolicy) -> None:
    first = await policy.generate(_request(n=2, seed=11))
    again = await policy.generate(_request(n=2, seed=11))
    other = await policy.generate(_request(n=2, seed=12))
    assert [g.text for g in first] == [g.text for g in again]
    assert [g.text for g in first] != [g.text for g in other]


async def test_sixteen_concurrent_calls_complete(policy: ServePolicy) -> None:
    requests = [_request(n=1, max_tokens=24, seed=100 + i) for i in range(16)]
    results = await asyncio.gather(*(policy.generate(r) for r in requests))
    assert all(len(r) == 1 and r[0].finish is not FinishReason.ERROR for r in results)


async def test_load_counts_the_sequences_in_flight_at_llamacpp(policy: ServePolicy) -> None:
    """llama.cpp does not report its busy slots; the replica's own count of engine calls
    in flight stands in (admission grows its target only while the batch has room):
    never more running than the 4 slots, the rest waiting, nothing left after."""
    requests = [_request(n=1, max_tokens=48, seed=200 + i) for i in range(8)]
    calls = asyncio.gather(*(policy.generate(r) for r in requests))
    seen: list[dict[str, Any]] = []
    while not calls.done():
        seen.append(await policy.handle.load.remote())
        await asyncio.sleep(0.05)
    await calls
    assert {load["max_seqs"] for load in seen} == {4}
    assert all(load["running"] <= 4 and load["waiting"] >= 0 for load in seen)
    busiest = max(seen, key=lambda load: load["running"] + load["waiting"])
    assert busiest["running"] == 4 and busiest["waiting"] > 0, seen
    idle = await policy.handle.load.remote()
    assert (idle["running"], idle["waiting"]) == (0, 0)


async def test_a_timeout_surfaces_as_a_failed_node(policy: ServePolicy) -> None:
    impatient = ServePolicy(
        policy.handle,
        ServiceConfig(engine=ENGINE, request_timeout_s=0.001, max_retries=1, retry_backoff_s=0.0),
    )
    (failed,) = await impatient.generate(_request(n=1, max_tokens=200))
    assert failed.finish is FinishReason.ERROR and failed.error and "TimeoutError" in failed.error
    config = parse_search_config({"algorithm": "bg_mcts", "max_stalled_expansions": 2})
    result = await run_search("What is 2+2?", config, impatient, _NoScorer(), 500)
    assert result.tree.nodes[1].error and not result.tree.nodes[1].expandable
    assert result.stop_reason == "stalled" and result.c_used == 0


class _NoScorer:
    name = "unused"

    async def score(self, request: ScoreRequest) -> Any:
        raise AssertionError("failed nodes are never scored")


async def test_missing_model_is_a_clear_error_before_deploying(ray_cluster: None) -> None:
    with pytest.raises(EngineError, match=re.escape("model file not found: /nope/model.gguf")):
        deploy_policy(ServiceConfig(engine=LlamaCppConfig(model="/nope/model.gguf")), app="bad")


async def test_genprm_scores_and_reuses_the_parent_critique(scorer: ServeScorer) -> None:
    problem = "What is 12 times 3?"
    first = ScoreRequest(
        problem, (" 12 times 3 means adding 12 three times.",), None, False, None, False, 0.0
    )
    before = (await scorer.stats())["engine_calls"]
    score1 = await scorer.score(first)
    after_first = (await scorer.stats())["engine_calls"]
    assert score1.error is None and 0.0 <= score1.value <= 1.0
    second = ScoreRequest(
        problem,
        (*first.path, "\nStep 2: 12 + 12 + 12 = 36."),
        score1.context,
        False,
        None,
        False,
        0.0,
    )
    score2 = await scorer.score(second)
    after_second = (await scorer.stats())["engine_calls"]
    assert 0.0 <= score2.value <= 1.0
    # one step = one analysis + one judgement; step 1's critique is reused, not regenerated
    assert after_first - before == 2 and after_second - after_first == 2
    assert score1.context[-1] in score2.context


async def test_search_end_to_end_through_both_deployments(
    policy: ServePolicy, scorer: ServeScorer
) -> None:
    config = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 48})
    result = await run_search("What is 12 times 3?", config, policy, scorer, 200, seed=3)
    assert 0 < result.c_used <= 200
    assert all(0.0 <= n.q <= 1.0 for n in result.tree)
    # every generated node is scored; a failed generation (an empty answer) is not
    generated = [n for n in result.tree if n.parent_id is not None]
    failed = sum(n.finish is FinishReason.ERROR for n in generated)
    assert result.tokens.scorer_requests == len(generated) - failed
