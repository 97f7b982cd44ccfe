"""The engine-shaped load model: its timing follows the curve, the cache and the batch cap.

The engine is driven directly on an event loop, with time scaled down so each check
takes well under a second.  The engine's own clock (the time the curve charged) is
compared with what the curve predicts; the wall clock is checked only from below, so a
loaded 2-core machine cannot fail a check.  Its placeholder answers keep the engine
contract, and one search runs through real Serve deployments on it (the one Ray test
here).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pydantic import ValidationError

from actors.config import ScorerConfig, ServiceConfig
from actors.engines.base import Completion, Engine, Sampling
from actors.engines.batching import ContinuousBatcher, EngineCurve, PrefixCache
from actors.engines.factory import build_engine
from actors.engines.load_model import ANSWER_TEXT, LoadModelConfig, LoadModelEngine
from actors.genprm import judgement_score
from actors.serve import deploy_policy, deploy_scorer
from search import SearchResult, parse_search_config, run_search
from search.protocols import FinishReason

CURVE = EngineCurve(
    decode_base_s=0.010, decode_per_seq_s=0.001, prefill_tokens_per_s=10_000, max_seqs=4
)


def _words(n: int, tag: str = "w") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def test_curve_ceiling_and_work() -> None:
    assert CURVE.step_s(4) == pytest.approx(0.014)
    assert CURVE.ceiling_decode_tokens_per_s == pytest.approx(4 / 0.014)
    # 14 decode steps at a full batch of 4 cost 14 * 0.014 / 4 s, plus 100 prefill tokens
    assert CURVE.work_s(14, 100) == pytest.approx(14 * 0.014 / 4 + 0.01)
    default = LoadModelConfig()
    engine = build_engine(default)
    assert isinstance(engine, LoadModelEngine) and isinstance(engine, Engine)
    # the cited H100 numbers: step(10) ~ 7.9 ms, step(256) ~ 20.4 ms, ~12,550 tokens/s
    curve = engine.batcher.curve
    assert curve.step_s(10) == pytest.approx(0.0079, abs=2e-4)
    assert curve.step_s(256) == pytest.approx(0.0204, abs=2e-4)
    assert engine.ceiling()["decode_tokens_per_s"] == pytest.approx(12_550, rel=0.01)


def test_prefix_cache_is_lru_over_block_chains() -> None:
    cache = PrefixCache(capacity_tokens=8, block_tokens=2)  # 4 blocks
    a = cache.keys(_words(6, "a"))  # 3 blocks
    assert len(a) == 3 and len(cache.keys(_words(7, "a"))) == 3  # partial block not keyed
    assert cache.cached_blocks(a) == 0
    cache.insert(a)
    assert cache.cached_blocks(a) == 3
    # the same second block after a different first block is a different key (a chain)
    other = cache.keys(["x", "y", *_words(6, "a")[2:]])
    assert cache.cached_blocks(other) == 0
    cache.insert(cache.keys(_words(4, "b")))  # 2 more blocks: the oldest (a's first) goes
    assert cache.cached_blocks(a) == 0  # a's chain is broken at its first block
    assert cache.cached_blocks(cache.keys(_words(4, "b"))) == 2


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_decode_time_grows_with_the_batch_and_prefill_with_uncached_tokens() -> None:
    async def one(batcher: ContinuousBatcher, n: int, prompt: int) -> float:
        start = time.perf_counter()
        await asyncio.gather(
            *(batcher.run(_words(prompt, f"p{i}"), [], decode_steps=20) for i in range(n))
        )
        return time.perf_counter() - start

    scale = 2.0  # slower than the curve: timer jitter matters less
    alone_batcher = ContinuousBatcher(CURVE, PrefixCache(0), scale)
    alone = _run(one(alone_batcher, 1, 1))
    full_batcher = ContinuousBatcher(CURVE, PrefixCache(0), scale)
    full = _run(one(full_batcher, 4, 1))
    # 20 steps: 0.011 s each alone, 0.014 s each with 4 sequences.  The engine's own clock
    # (busy_s, what the curve charged) is checked to the curve; the wall clock only from
    # below (a sleep never ends early), since a loaded machine stretches it.
    assert alone_batcher.stats.busy_s == pytest.approx(20 * 0.011, rel=0.05)
    assert full_batcher.stats.busy_s == pytest.approx(20 * 0.014, rel=0.05)
    assert alone >= 0.95 * 20 * 0.011 * scale and full >= 0.95 * 20 * 0.014 * scale
    batcher = ContinuousBatcher(CURVE, PrefixCache(0), scale)
    long_prompt = _run(one(batcher, 1, 2000))  # +0.2 s of prefill
    assert batcher.stats.busy_s == pytest.approx(20 * 0.011 + 0.2, rel=0.05)
    assert long_prompt >= 0.95 * (20 * 0.011 + 0.2) * scale
    assert batcher.stats.prefill_tokens == 2000 and batcher.stats.decode_tokens == 20


def test_cached_prefix_is_not_prefilled_again() -> None:
    async def scenario() -> ContinuousBatcher:
        batcher = ContinuousBatcher(CURVE, PrefixCache(10_000, block_tokens=16), 0.1)
        parent = _words(320)
        await batcher.run(parent, _words(32, "out"), decode_steps=32)
        # the child's prompt is the parent's prompt and output, plus 16 new tokens
        child = [*parent, *_words(32, "out"), *_words(16, "new")]
        await batcher.run(child, [], decode_steps=4)
        return batcher

    stats = _run(scenario()).stats  # type: ignore[attr-defined]
    assert stats.prompt_tokens == 320 + 368
    assert stats.cached_prompt_tokens == 352  # the parent's 20 + 2 blocks
    assert stats.prefill_tokens == 320 + 16


def test_at_most_max_seqs_run_and_the_rest_queue() -> None:
    async def scenario() -> tuple[ContinuousBatcher, float]:
        batcher = ContinuousBatcher(CURVE, PrefixCache(0), 1.0)
        start = time.perf_counter()
        await asyncio.gather(*(batcher.run(["x"], [], decode_steps=10) for _ in range(8)))
        return batcher, time.perf_counter() - start

    batcher, elapsed = _run(scenario())  # type: ignore[misc]
    assert batcher.stats.max_running == 4
    # two full waves of 10 steps at 0.014 s, not one wave of 8 (the engine's clock; the
    # wall clock from below, as above)
    assert batcher.stats.busy_s == pytest.approx(2 * 10 * 0.014, rel=0.05)
    assert elapsed >= 0.95 * 2 * 10 * 0.014
    # a full batch all the time: the work equals the busy time (utilisation 1)
    assert batcher.stats.work_s == pytest.approx(batcher.stats.busy_s, rel=0.05)


def _respond(
    engine: LoadModelEngine,
    seed: int,
    max_tokens: int = 64,
    stop: tuple[str, ...] = ("\nStep",),
    top_logprobs: int = 0,
) -> Completion:
    sampling = Sampling(
        max_tokens=max_tokens, stop=stop, temperature=0.8, seed=seed, top_logprobs=top_logprobs
    )
    return engine.respond("user: hi", sampling)


def test_answers_stop_answer_and_judge() -> None:
    engine = LoadModelEngine(LoadModelConfig(output_tokens=12, answer_every=2))
    assert isinstance(engine, Engine)
    done = [_respond(engine, seed=s) for s in range(40)]
    stopped = [c for c in done if c.finish is FinishReason.STOP_STRING]
    answered = [c for c in done if c.finish is FinishReason.EOS]
    assert stopped and answered and len(stopped) + len(answered) == 40
    assert all(c.output_tokens == 12 and c.stop_string == "\nStep" for c in stopped)
    assert all(c.text.endswith(ANSWER_TEXT) and c.output_tokens == 12 for c in answered)
    assert _respond(engine, seed=1) == _respond(engine, seed=1)  # deterministic
    cut = _respond(engine, seed=1, max_tokens=5)
    assert cut.finish is FinishReason.LENGTH and cut.output_tokens == 5
    judged = _respond(engine, seed=3, max_tokens=1, stop=(), top_logprobs=20)
    assert judged.output_tokens == 1 and len(judged.top_logprobs[0]) == 20
    assert 0.0 < judgement_score(judged.top_logprobs[0]) < 1.0
    assert asyncio.run(engine.tokenize("a b  c\nd")) == [0, 1, 2, 3]


def test_several_answers_are_drawn_per_completion() -> None:
    engine = LoadModelEngine(LoadModelConfig(output_tokens=12, answers=["42", "41"]))
    answers = {_respond(engine, seed=s, stop=()).text.split("boxed{")[1][:2] for s in range(40)}
    assert answers == {"42", "41"}
    assert _respond(engine, seed=7, stop=()) == _respond(engine, seed=7, stop=())


def test_engine_answers_as_it_responds_and_slows_marked_prompts() -> None:
    engine = build_engine(
        LoadModelConfig(
            decode_base_ms=1.0,
            decode_per_seq_ms=0.0,
            output_tokens=12,
            answer_every=2,
            slow_marker="SLOW",
            slow_factor=20,
        )
    )
    assert isinstance(engine, LoadModelEngine)

    async def timed(prompt: str, seed: int) -> tuple[Completion, Completion, float]:
        sampling = Sampling(max_tokens=64, stop=("\nStep",), temperature=0.8, seed=seed)
        start = time.perf_counter()
        got = await engine.complete(prompt, sampling)
        took = time.perf_counter() - start
        return got, engine.respond(prompt, sampling), took

    for seed in range(6):
        got, expected, _ = _run(timed("user: hi", seed))  # type: ignore[misc]
        assert got.text == expected.text and got.finish is expected.finish
        assert got.output_tokens == expected.output_tokens
    _, _, fast = _run(timed("user: quick", 0))  # type: ignore[misc]
    _, _, slow = _run(timed("user: SLOW one", 0))  # type: ignore[misc]
    assert fast < 0.1 and slow > 0.2  # 12 steps of 1 ms vs 240 steps of 1 ms
    overflow = _run(
        engine.complete("w " * 5000, Sampling(max_tokens=8, stop=(), temperature=0, seed=0))
    )
    assert overflow.finish is FinishReason.CONTEXT_OVERFLOW  # type: ignore[attr-defined]
    assert engine.stats()["requests"] == 8


def test_one_search_through_serve(ray_cluster: None) -> None:
    # 16 decode steps of 1.25 ms: a full completion takes 20 ms
    engine = LoadModelConfig(decode_base_ms=1.25, decode_per_seq_ms=0.0, output_tokens=16)
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
    # sequential GenPRM calls (a 16-token analysis, a one-token judgement): at least two
    # full completions per step.
    assert 4 <= result.iterations <= 5 and elapsed >= 2 * result.iterations * 0.02
    assert result.tokens.failed_generations == result.tokens.failed_scores == 0
    assert result.answered_nodes and result.chosen_answer == "42"
    assert stats["engine_calls"] == len(result.tree) - 1  # one engine call per child


def test_decode_steps_pay_for_the_context_the_batch_holds() -> None:
    """Attention cost (benchmarks/gpu_step_costs.py): each step is priced at the batch's
    context, which grows by one token per sequence per step and drops when one ends."""
    curve = EngineCurve(
        decode_base_s=0.001,
        decode_per_seq_s=0.0,
        prefill_tokens_per_s=1e12,
        max_seqs=4,
        decode_per_context_token_s=1e-5,
    )

    async def scenario() -> ContinuousBatcher:
        batcher = ContinuousBatcher(curve, PrefixCache(0), 1.0)
        await asyncio.gather(
            batcher.run(_words(100, "a"), [], decode_steps=10),
            batcher.run(_words(50, "b"), [], decode_steps=4),
        )
        return batcher

    batcher = _run(scenario())
    assert isinstance(batcher, ContinuousBatcher)
    # steps 0-3 hold both: 150 + 2i tokens; steps 4-9 hold the first alone: 100 + i
    context = sum(150 + 2 * i for i in range(4)) + sum(100 + i for i in range(4, 10))
    assert batcher.stats.context_tokens == pytest.approx(context)
    assert batcher.stats.busy_s == pytest.approx(10 * 0.001 + context * 1e-5, rel=1e-6)
    assert batcher._context_offset == 0  # nothing left behind when the batch empties
    # each request's work counts its own context: the same total, at a full batch's base
    assert batcher.stats.work_s == pytest.approx(
        14 * 0.001 / 4 + context * 1e-5 + 150 / 1e12, rel=1e-6
    )
    assert curve.ceiling_at(0) == pytest.approx(4 / 0.001)
    assert curve.ceiling_at(1000) == pytest.approx(4 / (0.001 + 4 * 1000 * 1e-5))


def test_a_curve_whose_step_takes_no_time_is_refused_when_the_config_is_read() -> None:
    """Both step costs 0 divided by zero in the batcher's loop, and every request waited
    for ever without a word."""
    with pytest.raises(ValidationError, match="decode_base_ms and decode_per_seq_ms are both 0"):
        LoadModelConfig.model_validate(
            {"kind": "load_model", "decode_base_ms": 0, "decode_per_seq_ms": 0}
        )
