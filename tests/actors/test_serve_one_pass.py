"""The one-pass PRM scorer behind Ray Serve, on a real local Ray cluster.

The deployment is `deploy_scorer` of a `scorer.kind: one_pass` config on the session's
tiny random PRM checkpoint (`tests/prm_checkpoint.py`: SmolLM2's real tokenizer, a random
two-class token head), run by the `transformers_prm` engine in the replica.  Requests go
through `ServeScorer` with coalescing on, as the search actors send them; the values are
checked against the same engine class scoring the same steps in this process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from actors.config import ScorerConfig
from actors.engines.transformers_prm import TransformersPRMConfig, TransformersPRMEngine
from actors.one_pass import OnePassScorer, node_value
from actors.serve import ServeScorer, deploy_scorer
from search.protocols import ScoreRequest

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

# Batched against alone, float32 on CPU: the order of float sums differs, not the maths.
TOLERANCE = 1e-5
CONTEXT = 96  # tokens: room for the short paths below, not for LONG
PROBLEM = "Jon has 6 jars with 5 marbles in each jar. How many marbles does Jon have?"
ANSWERED = " Jon has 6 x 5 = 30 marbles. The answer is 30.\nProblem: Mia has 4 shells."


def _request(*path: str, answered: bool = False, answer_end: int | None = None) -> ScoreRequest:
    answer = "30" if answered else None
    return ScoreRequest(PROBLEM, path, None, answered, answer, False, 1e9, answer_end=answer_end)


REQUESTS = [
    _request(" 6 jars."),
    _request(" 6 jars.", "\nStep 2: 6 x 5 = 30."),
    _request(" 6 + 5 = 11.\nThe answer is 11.", answered=True),
    # the answer statement ends at "30."; what follows is cut (`cut_after_answer`)
    _request(ANSWERED, answered=True, answer_end=ANSWERED.index("30.\n") + 3),
]
LONG = _request(*[f"\nStep {i}: each jar holds five marbles and there are six" for i in range(9)])


@pytest.fixture(scope="module")
def config(tiny_prm: Path) -> ScorerConfig:
    engine = TransformersPRMConfig(model=str(tiny_prm), context_length=CONTEXT, max_batch=8)
    return ScorerConfig(kind="one_pass", engine=engine, one_pass={"node_value": "min"})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scorer(ray_cluster: None, config: ScorerConfig) -> AsyncIterator[ServeScorer]:
    yield deploy_scorer(config)


def _direct(config: ScorerConfig, requests: list[ScoreRequest]) -> list[tuple[float, int]]:
    """(Q, input tokens) of each request from the engine in this process, one path at a
    time: the steps and prompt the scorer lays out, the engine's values, the Q rule."""
    engine = TransformersPRMEngine(config.engine, step_separator=config.one_pass.step_separator)
    layout = OnePassScorer(engine, config.one_pass)

    async def one(request: ScoreRequest) -> tuple[float, int]:
        steps = layout.steps(request)
        result = await engine.score_steps(await layout.prompt(request.problem), steps)
        assert result.error is None and len(result.values) == len(steps)
        return node_value(result.values, config.one_pass.node_value), result.input_tokens

    return [asyncio.run(one(r)) for r in requests]


async def test_scores_through_serve_equal_the_engine_scoring_directly(
    scorer: ServeScorer, config: ScorerConfig
) -> None:
    assert scorer.coalesced and scorer.name == "serve:one_pass"
    before = await scorer.stats()
    scores = await asyncio.gather(*(scorer.score(r) for r in REQUESTS))
    expected = await asyncio.to_thread(_direct, config, REQUESTS)
    for score, (value, tokens) in zip(scores, expected, strict=True):
        assert score.error is None
        assert score.value == pytest.approx(value, abs=TOLERANCE)
        assert (score.input_tokens, score.output_tokens) == (tokens, 0)
    values = [s.value for s in scores]
    assert max(values) - min(values) > 0.05  # distinct values: not one constant answer
    # the cut answer path reads only up to "The answer is 30.": fewer tokens than the whole
    uncut = await asyncio.to_thread(_direct, config, [_request(ANSWERED, answered=True)])
    assert scores[3].input_tokens < uncut[0][1]
    stats = await scorer.stats()
    assert stats["name"] == f"one_pass:{Path(config.engine.model).name}"
    served = sum(s.input_tokens for s in scores)
    assert stats["requests"] - before["requests"] == len(REQUESTS)
    assert stats["engine_calls"] - before["engine_calls"] == len(REQUESTS)
    assert stats["engine_prompt_tokens"] - before["engine_prompt_tokens"] == served
    # the engine computed what it did not read from its cache of earlier paths' KV (a
    # child scored after its parent reads the parent's path; in one batch, nothing)
    computed = stats["prompt_tokens_evaluated"] - before["prompt_tokens_evaluated"]
    cached = stats["prompt_tokens_cached"] - before["prompt_tokens_cached"]
    assert computed + cached == served and computed > 0
    assert stats["engine_cached_prompt_tokens"] - before["engine_cached_prompt_tokens"] == cached
    assert stats["engine_output_tokens"] == stats["tokens_generated"] == 0


async def test_a_path_over_the_context_is_an_error_score_not_an_exception(
    scorer: ServeScorer,
) -> None:
    long, short = await asyncio.gather(scorer.score(LONG), scorer.score(REQUESTS[0]))
    assert long.value == 0.0 and long.output_tokens == 0
    assert long.input_tokens > CONTEXT
    assert long.error is not None
    assert long.error.startswith("one-pass PRM: context overflow: ")
    assert f"context_length is {CONTEXT}" in long.error
    assert short.error is None and short.input_tokens < CONTEXT  # its neighbour is scored


async def test_the_chat_prompt_is_rendered_in_the_replica(
    ray_cluster: None, config: ScorerConfig
) -> None:
    """`prompt_format: chat`: the replica renders the checkpoint's chat template (through
    the counting wrapper around its engine), as the engine in this process does."""
    chat = config.model_copy(
        update={
            "engine": config.engine.model_copy(update={"context_length": None}),
            "one_pass": config.one_pass.model_copy(
                update={"prompt_format": "chat", "node_value": "product"}
            ),
        }
    )
    scorer = deploy_scorer(chat, app="scorer-chat")
    scores = await asyncio.gather(*(scorer.score(r) for r in REQUESTS[:2]))
    expected = await asyncio.to_thread(_direct, chat, REQUESTS[:2])
    plain = await asyncio.to_thread(_direct, config, REQUESTS[:1])
    for score, (value, tokens) in zip(scores, expected, strict=True):
        assert score.error is None
        assert score.value == pytest.approx(value, abs=TOLERANCE)
        assert score.input_tokens == tokens
    assert scores[0].input_tokens > plain[0][1] + 10  # the system turn and chat markup
