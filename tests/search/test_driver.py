"""The async driver's contract, against the deterministic scripted policy and scorer.

The scripted policy is a fake (no model runs in unit tests); it counts one token per
word, so every charge below can be checked exactly.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from search import parse_search_config, run_search
from search.budget import BudgetViolation
from search.protocols import FinishReason, Generation, GenerationRequest, Score, ScoreRequest
from search.scripted import ScriptedPolicy, ScriptedScorer, count_words


@dataclass
class RecordingPolicy(ScriptedPolicy):
    requests: list[GenerationRequest] = field(default_factory=list)

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        self.requests.append(request)
        return await super().generate(request)


@dataclass
class ConcurrencyScorer(ScriptedScorer):
    in_flight: int = 0
    peak: int = 0

    async def score(self, request: ScoreRequest) -> Score:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.001)
        self.in_flight -= 1
        return await super().score(request)


async def test_leaf_children_are_one_request_and_scored_concurrently() -> None:
    policy, scorer = RecordingPolicy(seed=1), ConcurrencyScorer(seed=1)
    config = parse_search_config({"algorithm": "bg_mcts", "k": 3, "generative_node": False})
    result = await run_search("p", config, policy, scorer, budget=2000, seed=1)
    assert policy.requests[0].n == 3 and policy.requests[0].assistant_prefix == "Step 1:"
    assert all(r.n == 3 for r in policy.requests[:-1])
    assert scorer.peak == 3
    assert result.tokens.policy_requests == len(policy.requests)
    assert len(result.tree) - 1 == sum(r.n for r in policy.requests)


async def test_budget_is_spent_exactly_and_never_exceeded() -> None:
    config = parse_search_config({"algorithm": "bg_mcts"})
    result = await run_search("p", config, ScriptedPolicy(seed=2), ScriptedScorer(seed=2), 3000)
    assert result.c_used == 3000 and result.stop_reason == "budget_exhausted"
    assert result.tokens.policy_output_tokens + result.tokens.inserted_prompt_tokens == 3000
    assert [p.c_used for p in result.trace] == sorted(p.c_used for p in result.trace)
    assert result.trace[-1].c_used == result.c_used


async def test_step_boundary_is_reinserted_free_and_continuations_are_charged() -> None:
    policy = RecordingPolicy(seed=3, p_answer=0.5)
    config = parse_search_config({"algorithm": "mcts"})
    result = await run_search("p", config, policy, ScriptedScorer(seed=3), 4000, seed=3)
    tree = result.tree
    after_boundary = [
        n for n in tree if n.parent_id and tree[n.parent_id].finish is FinishReason.STOP_STRING
    ]
    assert after_boundary and all(n.inserted_text == "\nStep" for n in after_boundary)
    assert all(n.inserted_tokens == 0 for n in after_boundary)
    assert all("\nStep" not in n.text for n in tree if n.finish is FinishReason.STOP_STRING)
    continuations = [n for n in tree if n.parent_id and tree[n.parent_id].answered]
    assert continuations, "the scripted run should continue at least one answered node"
    for node in continuations:
        assert node.inserted_text.startswith("\nBut wait, let me think about the problem again.")
        assert node.inserted_tokens == count_words(node.inserted_text) == 10
    charged = sum(n.output_tokens + n.inserted_tokens for n in tree)
    assert (
        charged
        == result.c_used
        == result.tokens.policy_output_tokens + result.tokens.inserted_prompt_tokens
    )


async def test_full_generation_requests_have_no_stop_string() -> None:
    policy = RecordingPolicy(seed=4)
    config = parse_search_config({"algorithm": "repeated_sampling"})
    result = await run_search("p", config, policy, ScriptedScorer(seed=4), 3000)
    assert all(r.stop == () and r.max_tokens <= 4096 for r in policy.requests)
    assert all(n.full_generation for n in result.tree.nodes[1:])
    assert result.c_used <= 3000


async def test_greedy_is_one_generation_at_temperature_zero() -> None:
    policy = RecordingPolicy(seed=5)
    result = await run_search(
        "p", parse_search_config({"algorithm": "greedy"}), policy, ScriptedScorer(), 10_000
    )
    assert len(policy.requests) == 1 and policy.requests[0].temperature == 0.0
    assert result.stop_reason == "algorithm_done"


async def test_same_seed_same_tree_and_concurrent_searches_match_serial() -> None:
    config = parse_search_config({"algorithm": "bg_mcts"})

    async def one(seed: int) -> list[dict[str, object]]:
        result = await run_search(
            "p", config, ScriptedPolicy(seed=seed), ScriptedScorer(seed=seed), 1500, seed=seed
        )
        return result.tree.rows()

    serial = [await one(s) for s in range(12)]
    concurrent = await asyncio.gather(*(one(s) for s in range(12)))
    assert serial == list(concurrent)
    assert serial[0] != serial[1]


class ExplodingPolicy:
    name = "exploding"

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        raise ConnectionError("engine down")

    async def count_tokens(self, text: str) -> int:
        return count_words(text)


async def test_failing_policy_fails_nodes_and_the_search_ends() -> None:
    config = parse_search_config({"algorithm": "bg_mcts", "max_stalled_expansions": 4})
    result = await run_search("p", config, ExplodingPolicy(), ScriptedScorer(), 1000)
    assert result.stop_reason in {"stalled", "algorithm_done"}
    failed = result.tree.nodes[1:]
    assert failed and all(n.error and "engine down" in n.error for n in failed)
    assert result.chosen_answer is None and result.c_used == 0


class LyingPolicy(ScriptedPolicy):
    async def generate(self, request: GenerationRequest) -> list[Generation]:
        return [Generation("x", request.max_tokens + 1, FinishReason.LENGTH)] * request.n


async def test_policy_overreporting_tokens_is_a_budget_violation() -> None:
    with pytest.raises(BudgetViolation, match="max_tokens"):
        await run_search(
            "p", parse_search_config({"algorithm": "mcts"}), LyingPolicy(), ScriptedScorer(), 100
        )


class FlakyScorer(ScriptedScorer):
    async def score(self, request: ScoreRequest) -> Score:
        odd = count_words(request.path[-1]) % 2 == 1
        if len(request.path) == 2 and odd:
            raise TimeoutError("prm timeout")
        if len(request.path) == 3 and odd:
            return Score(float("nan"))
        return await super().score(request)


async def test_scorer_failure_fails_the_node_not_the_search() -> None:
    config = parse_search_config({"algorithm": "bg_mcts"})
    result = await run_search("p", config, ScriptedPolicy(seed=6), FlakyScorer(seed=6), 2000)
    errors = [n.error for n in result.tree if n.error]
    assert any("prm timeout" in e for e in errors)
    assert any("outside [0, 1]" in e for e in errors)
    assert all(not n.expandable for n in result.tree if n.error)
    assert result.tokens.failed_scores == len(errors)
    assert result.c_used <= 2000


async def test_input_and_prm_costs_keep_the_budget() -> None:
    config = parse_search_config(
        {
            "algorithm": "bg_mcts",
            "cost": {
                "policy_input": 0.1,
                "prm_input": 0.05,
                "prm_output": 1.0,
                "prm_reserve_input_tokens": 2000,
                "prm_reserve_output_tokens": 8,
            },
        }
    )
    result = await run_search("p", config, ScriptedPolicy(seed=7), ScriptedScorer(seed=7), 4000)
    tokens = result.tokens
    assert (
        tokens.policy_input_tokens > 0
        and tokens.prm_input_tokens > 0
        and tokens.prm_output_tokens > 0
    )
    expected = (
        tokens.policy_output_tokens
        + tokens.inserted_prompt_tokens
        + 0.1 * tokens.policy_input_tokens
        + 0.05 * tokens.prm_input_tokens
        + tokens.prm_output_tokens
    )
    assert result.c_used == pytest.approx(expected)
    assert result.c_used <= 4000


async def test_context_overflow_ends_a_path_without_crashing() -> None:
    policy = ScriptedPolicy(seed=8, p_overflow=0.3)
    result = await run_search(
        "p", parse_search_config({"algorithm": "bg_mcts"}), policy, ScriptedScorer(seed=8), 2000
    )
    overflowed = [n for n in result.tree if n.finish is FinishReason.CONTEXT_OVERFLOW]
    assert overflowed and all(not n.expandable and not n.children for n in overflowed)
    assert result.c_used <= 2000


@dataclass
class SilentPolicy(RecordingPolicy):
    """The scripted policy with an engine that reports no prompt tokens."""

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        generations = await super().generate(request)
        return [Generation(g.text, g.output_tokens, g.finish, 0, g.error) for g in generations]


@pytest.mark.parametrize(
    "settings",
    [
        {"algorithm": "bg_mcts"},
        {"algorithm": "bg_mcts", "max_inflight_expansions": 4},
        {"algorithm": "bg_mcts", "conventions": "reference"},
        {"algorithm": "mcts"},
    ],
    ids=["bg_mcts", "bg_mcts-inflight", "bg_mcts-reference", "mcts"],
)
async def test_prompt_tokens_are_counted_uncharged_when_prompts_are_free(
    settings: dict[str, object],
) -> None:
    """The paper's budget (no weight on prompts) still counts the prompt tokens the
    engine reports, once per request, and charges none of them: the search, its C_used
    and its trace are those of an engine that reports no prompt tokens at all."""
    config = parse_search_config(settings)
    counted, silent = RecordingPolicy(seed=9), SilentPolicy(seed=9)
    result = await run_search("what is p?", config, counted, ScriptedScorer(seed=9), 3000)
    free = await run_search("what is p?", config, silent, ScriptedScorer(seed=9), 3000)
    prompts = sum(
        count_words(r.problem) + count_words(r.assistant_prefix) for r in counted.requests
    )
    assert result.tokens.policy_input_tokens == prompts > len(counted.requests) * 3
    assert free.tokens.policy_input_tokens == 0
    assert result.c_used == free.c_used <= 3000
    assert (
        result.c_used == result.tokens.policy_output_tokens + result.tokens.inserted_prompt_tokens
    )
    assert result.trace == free.trace
    assert [n.text for n in result.tree] == [n.text for n in free.tree]
    assert counted.requests == silent.requests
