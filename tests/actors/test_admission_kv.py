"""KV capacity in the load model, engine capacity reports and the admission rule.

The batcher runs on the benchmark's virtual clock (`benchmarks.h100_goodput`), so
these checks do not depend on the machine's load: they count tokens, not seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import pytest

from actors.admission import (
    AdmissionController,
    AdmissionGate,
    LoadReading,
    LoadTracker,
    TreeShape,
    admitted_per_actor,
    trees_in_flight,
)
from actors.engines.base import EngineCapacity, EngineLoad, engine_capacity, engine_load
from actors.engines.batching import ContinuousBatcher, EngineCurve, PrefixCache
from actors.engines.factory import build_engine
from actors.engines.load_model import LoadModelConfig
from benchmarks.h100_goodput import VirtualClockLoop
from search import parse_search_config

CURVE = EngineCurve(
    decode_base_s=0.010, decode_per_seq_s=0.001, prefill_tokens_per_s=10_000, max_seqs=4
)


def _virtual(coro: Coroutine[Any, Any, Any]) -> Any:
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def _words(n: int, tag: str) -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def test_contexts_that_do_not_fit_are_evicted_and_prefilled_again() -> None:
    """Two 320-token contexts, asked for in turn: a 400-token KV cache holds one of them
    (each eviction is counted and the next request prefills again), 800 tokens hold both."""

    async def alternate(cache_tokens: int) -> ContinuousBatcher:
        batcher = ContinuousBatcher(CURVE, PrefixCache(cache_tokens, 16), 1.0)
        a, b = _words(320, "a"), _words(320, "b")
        for _ in range(3):
            await batcher.run(a, [], 8)
            await batcher.run(b, [], 8)
        return batcher

    small = _virtual(alternate(400))
    large = _virtual(alternate(800))
    assert small.stats.cached_prompt_tokens == 0
    assert small.stats.evicted_tokens > 0
    assert small.stats.prefill_tokens == 6 * 320
    # the second round onwards hits all but the block holding the last token (as vLLM: a
    # prompt's last token is always computed, and only whole blocks are read)
    assert large.stats.cached_prompt_tokens == 4 * 304
    assert large.stats.evicted_tokens == 0


def test_a_sibling_admitted_with_its_twin_shares_the_prefilled_prompt() -> None:
    async def twins() -> ContinuousBatcher:
        import asyncio

        batcher = ContinuousBatcher(CURVE, PrefixCache(10_000, 16), 1.0)
        prompt = _words(160, "p")
        await asyncio.gather(batcher.run(prompt, [], 4), batcher.run(prompt, [], 4))
        return batcher

    batcher = _virtual(twins())
    # the twin computes only the block that holds its last token (160 = 10 blocks of 16)
    assert batcher.stats.prefill_tokens == 160 + 16


def test_running_sequences_wait_for_kv_and_push_cached_prefixes_out() -> None:
    """A 200-token KV cache: three 100-token outputs cannot run at once."""

    async def three() -> ContinuousBatcher:
        import asyncio

        batcher = ContinuousBatcher(CURVE, PrefixCache(200, 16), 1.0)
        await asyncio.gather(*(batcher.run(_words(16, f"x{i}"), [], 100) for i in range(3)))
        return batcher

    batcher = _virtual(three())
    assert batcher.stats.max_running == 1
    assert batcher.stats.kv_waits > 0


@dataclass
class BareEngine:
    """An engine that says nothing of its capacity or load: only its context."""

    context_length: int


def test_engines_report_their_capacity() -> None:
    engine = build_engine(LoadModelConfig(max_seqs=64, cache_tokens=160_000))
    capacity = engine_capacity(engine)
    assert capacity == EngineCapacity(
        max_seqs=64, kv_tokens=160_000, context_length=4096, prefix_hit_rate=None
    )
    # an engine without `capacity()`: one sequence of its context (never over-admits)
    fallback = engine_capacity(BareEngine(context_length=2048))
    assert fallback == EngineCapacity(max_seqs=1, kv_tokens=2048, context_length=2048)


def test_admission_is_the_smaller_of_full_and_warm_under_the_cap() -> None:
    h100 = EngineCapacity(max_seqs=256, kv_tokens=400_000, context_length=32_768)
    # short contexts: filling 256 slots at 2 sequences per tree needs 128 trees
    assert trees_in_flight([(h100, TreeShape(2.0, 1_000))], cap=1024) == 128
    # long contexts: only 0.9 * 400k / 9,000 = 40 working sets stay cached
    assert trees_in_flight([(h100, TreeShape(2.0, 9_000))], cap=1024) == 40
    assert trees_in_flight([(h100, TreeShape(2.0, 1_000))], cap=16) == 16
    # a measured hit rate below 0.8 shrinks the count in proportion
    cold = EngineCapacity(256, 400_000, 32_768, prefix_hit_rate=0.4)
    assert trees_in_flight([(cold, TreeShape(2.0, 9_000))], cap=1024) == 20
    # the tightest engine decides
    small = EngineCapacity(max_seqs=8, kv_tokens=8 * 4096, context_length=4096)
    assert trees_in_flight([(h100, TreeShape(2, 1_000)), (small, TreeShape(2, 1_000))], cap=99) == 4


def test_admitted_per_actor_splits_the_deployments_over_the_actors() -> None:
    search = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 512})
    one = {"max_seqs": 256, "kv_tokens": 400_000, "context_length": 32_768}
    kwargs: dict[str, Any] = {
        "capacities": {"policy": one, "scorer": one},
        "search": search,
        "budget": 10_000,
        "analysis_tokens": 1024,
        "prompt_tokens": 300,
        "cap": 1000,
    }
    total = admitted_per_actor(replicas={"policy": 1, "scorer": 1}, actors=1, **kwargs)
    assert 1 < total < 128  # warm wins at these contexts
    assert admitted_per_actor(
        replicas={"policy": 2, "scorer": 2}, actors=2, **kwargs
    ) == pytest.approx(total, abs=1)
    assert (
        admitted_per_actor(replicas={"policy": 1, "scorer": 1}, actors=1, **{**kwargs, "cap": 3})
        == 3
    )


def test_the_controller_adds_trees_while_the_batch_has_room_and_sheds_them_when_cold() -> None:
    controller = AdmissionController(start=14, cap=40)
    # batch not full, cache warm: more trees (an eighth more, at least one)
    assert controller.update(running=100, waiting=0, max_seqs=256, hit_rate=0.95) == 16
    # full batch, warm cache: hold
    assert controller.update(running=256, waiting=30, max_seqs=256, hit_rate=0.95) == 16
    # contexts being evicted: an eighth fewer
    assert controller.update(running=256, waiting=0, max_seqs=256, hit_rate=0.5) == 14
    for _ in range(20):
        controller.update(running=0, waiting=0, max_seqs=256, hit_rate=None)
    assert controller.target == 40  # the cap (trees_per_actor) holds


def test_the_controller_keeps_its_target_when_the_engine_does_not_say() -> None:
    controller = AdmissionController(start=6, cap=40)
    # vLLM / llama.cpp: no running/waiting, no traffic in the interval: hold
    unknown = LoadReading(running=None, waiting=None, max_seqs=256, hit_rate=None)
    assert controller.observe(unknown) == 6
    # the hit rate alone still sheds trees when contexts are being evicted
    assert controller.observe(LoadReading(None, None, 256, hit_rate=0.5)) == 5
    assert controller.observe(LoadReading(None, None, 256, hit_rate=0.99)) == 5
    assert controller.observe(LoadReading(3, 0, 256, hit_rate=0.99)) == 6


def test_engines_report_their_load() -> None:
    engine = build_engine(LoadModelConfig(max_seqs=64))
    assert engine_load(engine) == EngineLoad(64, 0, 0, 0, 0)
    # an engine without `load()`: its slots only, nothing live
    assert engine_load(BareEngine(context_length=2048)) == EngineLoad(max_seqs=1)


def test_the_tracker_reads_the_hit_rate_over_the_interval_per_replica() -> None:
    tracker = LoadTracker()

    def load(replica: str, prompt: int, cached: int, running: int | None = 2) -> dict[str, Any]:
        return {
            "max_seqs": 8,
            "running": running,
            "waiting": 0 if running is not None else None,
            "prompt_tokens": prompt,
            "cached_prompt_tokens": cached,
            "replica": replica,
        }

    replicas = {"policy": 2, "scorer": 1}
    first = tracker.reading({"policy": load("a", 1000, 0), "scorer": load("s", 100, 0)}, replicas)
    # one replica's batch stands for each of its role's replicas; no baseline yet
    assert first == LoadReading(running=6, waiting=0, max_seqs=24, hit_rate=None)
    # over the interval: (900 + 90) cached of (1000 + 100) new prompt tokens, not the
    # cumulative 990 / 2200
    second = tracker.reading(
        {"policy": load("a", 2000, 900), "scorer": load("s", 200, 90)}, replicas
    )
    assert second.hit_rate == pytest.approx(0.9)
    # another policy replica answers: its counters only set its baseline
    third = tracker.reading(
        {"policy": load("b", 5000, 0, running=None), "scorer": load("s", 300, 140)}, replicas
    )
    assert third.hit_rate == pytest.approx(0.5)
    assert third.running is None and third.waiting is None and third.max_seqs == 24


def test_the_gate_admits_new_trees_only_below_a_target_that_moves() -> None:
    async def scenario() -> list[int]:
        gate = AdmissionGate(2)
        seen: list[int] = []

        async def tree(release: asyncio.Event) -> None:
            await gate.enter()
            seen.append(gate.in_flight)
            await release.wait()
            await gate.leave()

        releases = [asyncio.Event() for _ in range(5)]
        tasks = [asyncio.ensure_future(tree(r)) for r in releases]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert gate.in_flight == 2  # the other three wait
        await gate.set_target(4)  # room in the batch: two more start
        for _ in range(3):
            await asyncio.sleep(0)
        assert gate.in_flight == 4
        await gate.set_target(1)  # running trees are never stopped...
        assert gate.in_flight == 4
        for release in releases[:4]:
            release.set()
        for _ in range(10):
            await asyncio.sleep(0)
        assert gate.in_flight == 1  # ...the last one starts once they are below the target
        releases[4].set()
        await asyncio.gather(*tasks)
        assert gate.peak == 4 and gate.in_flight == 0
        return seen

    assert asyncio.run(scenario()) == [1, 2, 3, 4, 1]


def test_even_router_deals_buckets_round_the_replicas() -> None:
    from actors.affinity import bucket
    from actors.routing import bucket_index, even_ranking

    replicas = ["r-b", "r-a"]  # ranked in id order, whatever order Serve lists them in
    assert even_ranking(replicas, 0, fallbacks=1) == [1, 0]
    assert even_ranking(replicas, 1, fallbacks=1) == [0, 1]
    assert even_ranking(replicas, 3, fallbacks=0) == [0]
    assert even_ranking([], 3, fallbacks=2) == []
    assert bucket_index("bucket-12") == 12 and bucket_index("tree-7") is None
    # one bucket per replica: two replicas get one bucket each, always
    keys = {bucket(f"q{i}", 2) for i in range(50)}
    firsts = {even_ranking(replicas, bucket_index(k) or 0, 0)[0] for k in keys}
    assert firsts == {0, 1}


def test_a_one_pass_scorer_holds_the_path_and_each_childs_step() -> None:
    search = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 512})
    roomy = {"max_seqs": 4096, "kv_tokens": 10**9, "context_length": 32_768}
    scorer = {"max_seqs": 4096, "kv_tokens": 1_000_000, "context_length": 32_768}
    kwargs: dict[str, Any] = {
        "capacities": {"policy": roomy, "scorer": scorer},
        "replicas": {"policy": 1, "scorer": 1},
        "search": search,
        "budget": 10_000,
        "prompt_tokens": 300,
        "actors": 1,
        "cap": 100_000,
    }
    # no analysis (a one-pass PRM decodes nothing): prompt, path and the k children's steps
    k = search.k
    path, step = 10_000 / k / 2, 512 / 2
    one_pass = admitted_per_actor(analysis_tokens=0, **kwargs)
    assert one_pass == int(0.9 * 1_000_000 // (300 + path + k * step))
    assert admitted_per_actor(analysis_tokens=1024, **kwargs) < one_pass
