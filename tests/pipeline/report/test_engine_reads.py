"""What the engines computed: each engine's cache reads flow from its answer to the tree's
counters, the trees table, the request log and the run's totals, under one definition
(`pipeline.report.engine_reads`: computed = sent - cached)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pandas as pd  # type: ignore[import-untyped]
import pytest

from actors.engines.base import Sampling
from actors.engines.factory import build_engine
from actors.engines.load_model import LoadModelConfig
from actors.replay import decode_generations, decode_score, encode_generations, encode_score
from pipeline.report.engine_reads import (
    EngineReads,
    clamped_note,
    engine_reads,
    engine_reads_rows,
    share,
)
from search import parse_search_config, run_search
from search.protocols import FinishReason, Generation, GenerationRequest, Score, ScoreRequest
from search.scripted import ScriptedPolicy, ScriptedScorer


class _CachingPolicy(ScriptedPolicy):
    """The scripted policy, each choice saying its engine read 3 prompt tokens from cache."""

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        choices = await super().generate(request)
        return [replace(g, cached_input_tokens=min(3, g.input_tokens)) for g in choices]


class _CachingScorer(ScriptedScorer):
    """The scripted scorer, each score reading 2 of its input tokens from cache."""

    async def score(self, request: ScoreRequest) -> Score:
        return replace(await super().score(request), input_tokens=10, cached_input_tokens=2)


def test_a_searchs_counters_add_up_every_calls_prompt_and_cache_reads() -> None:
    config = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 32})
    policy, scorer = _CachingPolicy(seed=1), _CachingScorer(seed=1)
    result = asyncio.run(run_search("What is 3+5?", config, policy, scorer, budget=300, seed=0))
    tokens, nodes = result.tokens, len(result.tree) - 1
    assert nodes > 1
    # every choice is one engine call whose prompt was sent; the budget's policy_input
    # counts one prompt per request, so the engine was sent at least that much
    assert tokens.policy_prompt_sent_tokens >= tokens.policy_input_tokens > 0
    assert tokens.policy_prompt_cached_tokens == 3 * nodes
    assert (tokens.prm_input_tokens, tokens.prm_prompt_cached_tokens) == (10 * nodes, 2 * nodes)


def test_the_request_log_keeps_the_cache_reads_and_reads_older_entries() -> None:
    generations = [Generation("Step 1: 4", 5, FinishReason.EOS, 40, None, 32)]
    assert decode_generations(encode_generations(generations)) == generations
    assert decode_generations([["Step 1: 4", 5, "eos", 40]]) == [
        Generation("Step 1: 4", 5, FinishReason.EOS, 40)
    ]
    score = Score(0.75, None, 60, 4, None, 48)
    assert decode_score(encode_score(score, None), None) == score
    assert (
        decode_score([0.75, 60, 4, {"full": None, "tuple": False}], None).cached_input_tokens == 0
    )


def test_the_load_model_says_what_its_cache_served() -> None:
    engine = build_engine(LoadModelConfig(time_scale=0.001, cache_tokens=10_000, block_tokens=4))
    prompt = " ".join(f"w{i}" for i in range(64))
    sampling = Sampling(max_tokens=4, temperature=0.0, seed=0, stop=())

    async def twice() -> list[int]:
        first = await engine.complete(prompt, sampling)
        second = await engine.complete(prompt, sampling)
        assert first.input_tokens == second.input_tokens == 64
        return [first.cached_tokens, second.cached_tokens]

    # the first prefills all; the second finds all 16 blocks cached, yet, as vLLM, computes
    # the block that holds the last prompt token (its logits start the decoding)
    assert asyncio.run(twice()) == [0, 60]


def test_the_runs_totals_follow_one_definition_and_older_runs_read_as_zero() -> None:
    trees = pd.DataFrame(
        {
            "policy_prompt_sent_tokens": [100, 300],
            "policy_prompt_cached_tokens": [60, 200],
            "prm_input_tokens": [50, 50],
            "prm_prompt_cached_tokens": [None, 25],  # a part written before they were counted
        }
    )
    reads = engine_reads(trees)
    assert reads["policy"] == EngineReads(400, 260)
    assert (reads["policy"].computed, reads["policy"].hit_rate) == (140, pytest.approx(0.65))
    assert reads["scorer"].as_dict() == {
        "sent": 100,
        "cached": 25,
        "computed": 75,
        "hit_rate": 0.25,
        "clamped_trees": 0,
    }
    assert engine_reads_rows(reads)[0] == ["policy", "400", "260", "140", "65.0%"]
    old = engine_reads(pd.DataFrame({"prm_input_tokens": [7]}))
    assert old == {"policy": EngineReads(0, 0), "scorer": EngineReads(7, 0)}
    assert engine_reads_rows(old)[0][-1] == "–"


def test_counts_that_cannot_be_are_clamped_per_tree_and_no_rate_leaves_0_to_1() -> None:
    # were a hit rate of 250% (cached above sent) and of -1.1% (a negative count)
    trees = pd.DataFrame(
        {
            "policy_prompt_sent_tokens": [100, 200, -50],
            "policy_prompt_cached_tokens": [250, 50, 10],
            "prm_input_tokens": [1000, 10, 0],
            "prm_prompt_cached_tokens": [-11, 5, None],
        }
    )
    reads = engine_reads(trees)
    # tree 1: cached read as its 100 sent; tree 3: sent read as 0, so its cached too
    assert reads["policy"] == EngineReads(300, 150, clamped=2)
    assert reads["scorer"] == EngineReads(1010, 5, clamped=1)
    for r in reads.values():
        assert r.hit_rate is not None and 0 <= r.hit_rate <= 1 and r.computed >= 0
    assert [row[-1] for row in engine_reads_rows(reads)] == ["50.0%", "0.5%"]
    note = clamped_note(reads)
    assert note is not None and "policy in 2 trees, scorer in 1 tree." in note
    assert clamped_note(engine_reads(trees.iloc[1:2])) is None


@pytest.mark.parametrize(("sent", "cached"), [(100, 250), (-90, 1), (100, -1), (0, 5)])
def test_a_rate_that_cannot_be_is_never_shown(sent: int, cached: int) -> None:
    # EngineReads made from totals written elsewhere (a report.json, a run summary)
    reads = EngineReads(sent, cached)
    assert reads.hit_rate is None and share(cached, sent) is None
    assert engine_reads_rows({"policy": reads})[0][-1] == "–"
    assert share(3, 4) == 0.75 and share(0, 4) == 0.0 and share(4, 4) == 1.0


def test_the_live_display_shows_no_hit_rate_that_cannot_be() -> None:
    import io

    from pipeline.run.live import LiveProgress

    live = LiveProgress(dict, total=1, budget=10.0, file=io.StringIO())
    lying = {
        "policy_prompt_sent_tokens": 100,
        "policy_prompt_cached_tokens": 250,
        "prm_input_tokens": -90,
        "prm_prompt_cached_tokens": 1,
    }
    assert live.view(lying).cache_hits() == "cache policy - PRM -"
    fine = dict(lying, policy_prompt_cached_tokens=60, prm_input_tokens=4)
    assert live.view(fine).cache_hits() == "cache policy 60% PRM 25%"


def test_totals_are_exact_and_never_wrap_round_below_zero() -> None:
    # two trees of 2**62 tokens each: an int64 sum wraps round to a negative total
    huge = 2**62
    trees = pd.DataFrame(
        {"policy_prompt_sent_tokens": [huge, huge], "policy_prompt_cached_tokens": [huge, 0]}
    )
    policy = engine_reads(trees)["policy"]
    assert (policy.sent, policy.cached, policy.clamped) == (2 * huge, huge, 0)
    assert policy.hit_rate == 0.5 and policy.computed == huge
