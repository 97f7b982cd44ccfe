"""Coalesced requests and tree-affinity routing on real Serve deployments (local Ray).

The deployments are the real `PolicyServer` / `ScorerServer` (GenPRM protocol) on the
model-free load model: what is tested is the request path (coalescing, routing,
failures, killed replicas), which an engine's text does not change.  The load model's
output is a deterministic function of each request (seed and prompt), so a result that
went to the wrong caller shows.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from actors.affinity import bucket, tree_affinity
from actors.config import ScorerConfig, ServiceConfig
from actors.engines.load_model import LoadModelConfig
from actors.serve import ServePolicy, ServeScorer, deploy_policy, deploy_scorer
from search import parse_search_config, run_search
from search.protocols import FinishReason, GenerationRequest, ScoreRequest

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

# 8 decode steps of 1.25 ms: each completion takes 10 ms.  No prefix cache: a request
# then answers the same whether it comes first or again (its cached prompt tokens too),
# so one sent alone and one sent coalesced compare equal.
ENGINE = LoadModelConfig(
    decode_base_ms=1.25, decode_per_seq_ms=0.0, output_tokens=8, answer_every=3, cache_tokens=0
)


def _service(**kw: Any) -> ServiceConfig:
    base: dict[str, Any] = {"engine": ENGINE, "max_retries": 0, "request_timeout_s": 30.0}
    base.update(kw)
    return ServiceConfig(**base)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def policy(ray_cluster: None) -> AsyncIterator[ServePolicy]:
    yield deploy_policy(_service(coalesce_window_s=0.05), app="coalesced-policy")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def scorer(ray_cluster: None) -> AsyncIterator[ServeScorer]:
    config = ScorerConfig(
        engine=ENGINE, max_retries=0, coalesce_window_s=0.05, genprm={"max_analysis_tokens": 8}
    )
    yield deploy_scorer(config, app="coalesced-scorer")


def _request(i: int, **kw: Any) -> GenerationRequest:
    base: dict[str, Any] = {
        "problem": f"What is {i} plus {i}?",
        "assistant_prefix": "Step 1:",
        "n": 2,
        "max_tokens": 32,
        "stop": ("\nStep",),
        "temperature": 0.8,
        "seed": 1000 + i,
    }
    base.update(kw)
    return GenerationRequest(**base)


async def test_coalesced_results_go_to_their_own_callers_and_one_failure_stays_alone(
    policy: ServePolicy,
) -> None:
    one_by_one = ServePolicy(policy.handle, _service(coalesce_max_batch=1))
    requests = [_request(i) for i in range(24)]
    # a request the replica cannot serve (its seed is not a number): fails in the engine call
    requests[5] = _request(5, seed="not a seed")
    expected = [await one_by_one.generate(r) for r in requests]
    calls_before = policy._coalescer("generate_many").calls
    results = await asyncio.gather(*(policy.generate(r) for r in requests))
    assert policy._coalescer("generate_many").calls - calls_before == 1  # one call for 24
    for i, (got, want) in enumerate(zip(results, expected, strict=True)):
        if i == 5:
            assert len(got) == 2 and all(g.finish is FinishReason.ERROR for g in got)
            assert got[0].error and "TypeError" in got[0].error
        else:
            assert got == want and all(g.finish is not FinishReason.ERROR for g in got)
    # the answers differ between requests, so a swapped result would have shown
    assert len({tuple(g.finish for g in r) for r in expected if r}) > 1


async def test_coalesced_scores_match_single_calls_and_a_bad_context_fails_alone(
    scorer: ServeScorer,
) -> None:
    config = ScorerConfig(engine=ENGINE, max_retries=0, coalesce_max_batch=1)
    one_by_one = ServeScorer(scorer.handle, config)
    requests = [
        ScoreRequest(f"Problem {i}", (f" step {i}",), None, False, None, False, 0.0)
        for i in range(8)
    ]
    # a step that is not text: the replica's GenPRM raises on it (this request only)
    requests[2] = ScoreRequest("Problem 2", (None,), None, False, None, False, 0.0)  # type: ignore[arg-type]
    expected = [await one_by_one.score(r) for r in requests]
    results = await asyncio.gather(*(scorer.score(r) for r in requests))
    assert expected[2].error is not None and results[2].error is not None
    assert "Error" in results[2].error and results[2].value == 0.0
    for i, (got, want) in enumerate(zip(results, expected, strict=True)):
        if i != 2:
            assert got.error is None and got.value == want.value and got.context == want.context
    assert len({r.value for r in expected if r.error is None}) > 1


async def test_the_k_children_of_a_leaf_are_scored_in_one_call(
    policy: ServePolicy, scorer: ServeScorer
) -> None:
    config = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 16})
    before = scorer._coalescer("score_many").calls, scorer._coalescer("score_many").requests
    result = await run_search("What is 2+2?", config, policy, scorer, 300, seed=1)
    calls = scorer._coalescer("score_many").calls - before[0]
    requests = scorer._coalescer("score_many").requests - before[1]
    assert requests == result.tokens.scorer_requests > 4
    # every expansion of a leaf adds k=2 children, scored by one call
    assert calls <= requests / 2 + 1, (calls, requests)


async def _replica_stats(client: ServePolicy, expect: int = 2) -> dict[str, dict[str, Any]]:
    """Stats of every replica: probe session keys until `expect` replicas answered.

    Probes go 16 at a time: the consistent-hash router places each key on its ring,
    and the default router spreads concurrent calls (sequential ones may all take the
    replica that answered last)."""
    seen: dict[str, dict[str, Any]] = {}
    for round_ in range(25):
        keys = [f"probe-{round_}-{i}" for i in range(16)]
        answers = await asyncio.gather(
            *(client.handle.options(session_id=k).stats.remote() for k in keys)
        )
        for stats in answers:
            seen[stats["replica"]] = stats
        if len(seen) >= expect:
            return seen
    raise AssertionError(f"only replicas {sorted(seen)} answered")


async def _tree_requests(client: ServePolicy, tree: str, count: int) -> list[Any]:
    with tree_affinity(tree):
        return list(await asyncio.gather(*(client.generate(_request(i)) for i in range(count))))


def _calls(stats: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {replica: int(s["engine_calls"]) for replica, s in stats.items()}


async def test_one_trees_requests_go_to_one_replica_and_fall_back_when_it_dies(
    ray_cluster: None,
) -> None:
    import ray

    client = deploy_policy(
        _service(
            num_replicas=2,
            coalesce_window_s=0.002,
            request_timeout_s=10.0,
            max_retries=3,
            retry_backoff_s=0.5,
        ),
        app="affinity-policy",
    )
    owners: dict[str, str] = {}
    for tree in ("tree-a", "tree-b", "tree-c", "tree-d", "tree-e", "tree-f"):
        before = _calls(await _replica_stats(client))
        results = await _tree_requests(client, tree, 12)
        assert all(g.finish is not FinishReason.ERROR for r in results for g in r)
        after = _calls(await _replica_stats(client))
        grew = {replica for replica in after if after[replica] != before.get(replica, 0)}
        assert len(grew) == 1, (tree, before, after)  # all 24 engine calls on one replica
        (owners[tree],) = grew
        assert after[owners[tree]] - before[owners[tree]] == 24
    assert len(set(owners.values())) == 2, owners  # the trees are spread over both replicas

    # Kill the replica that owns tree-a: its requests still succeed, on another replica.
    victim = owners["tree-a"]
    (name,) = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if victim in a["name"] and "affinity-policy" in a["name"]
    ]
    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
    deadline = time.monotonic() + 60
    while True:
        results = await _tree_requests(client, "tree-a", 6)
        if all(g.finish is not FinishReason.ERROR for r in results for g in r):
            break
        assert time.monotonic() < deadline, results[0]
    # every call of tree-a now succeeds, and no live replica is the one that died
    results = await _tree_requests(client, "tree-a", 6)
    assert all(g.finish is not FinishReason.ERROR for r in results for g in r)
    assert victim not in await _replica_stats(client, expect=1)


async def test_trees_hash_into_stable_buckets_spread_over_all_of_them() -> None:
    assert bucket("tree-a", 16) == bucket("tree-a", 16)  # not `hash`: no per-process salt
    assert bucket("tree-a", 16) == f"bucket-{zlib.crc32(b'tree-a') % 16}"
    assert len({bucket(f"problem-{i}", 16) for i in range(400)}) == 16


async def test_trees_of_one_bucket_share_a_coalesced_call_on_one_replica(
    ray_cluster: None,
) -> None:
    service = _service(num_replicas=2, coalesce_window_s=0.05, affinity_buckets_per_replica=2)
    client = deploy_policy(service, app="bucket-policy")
    assert service.affinity_buckets == 4
    trees = [f"tree-{i}" for i in range(40)]
    same = [t for t in trees if bucket(t, 4) == bucket(trees[0], 4)][:3]
    other = next(t for t in trees if bucket(t, 4) != bucket(trees[0], 4))
    assert len(same) == 3
    await _tree_requests(client, same[0], 1)  # the coalescer exists, the replicas are up
    coalescer = client._coalescer("generate_many")
    before_calls = coalescer.calls
    before = _calls(await _replica_stats(client))
    results = await asyncio.gather(*(_tree_requests(client, t, 4) for t in same))
    assert coalescer.calls - before_calls == 1  # 3 trees x 4 requests in one call
    after = _calls(await _replica_stats(client))
    grew = {r for r in after if after[r] != before.get(r, 0)}
    assert len(grew) == 1 and sum(after.values()) - sum(before.values()) == 24, (before, after)
    assert all(g.finish is not FinishReason.ERROR for r in results for rr in r for g in rr)
    # a tree of another bucket: its own call (the key routes the whole call)
    before_calls = coalescer.calls
    await asyncio.gather(_tree_requests(client, same[0], 2), _tree_requests(client, other, 2))
    assert coalescer.calls - before_calls == 2


async def test_without_affinity_one_trees_requests_spread(ray_cluster: None) -> None:
    """The contrast that shows the affinity test can fail: the default router scatters."""
    client = deploy_policy(
        _service(num_replicas=2, affinity=False, coalesce_max_batch=1), app="scatter-policy"
    )
    before = _calls(await _replica_stats(client))
    for _ in range(5):  # waves of 40 concurrent calls, until both replicas served some
        await _tree_requests(client, "tree-a", 40)
        after = _calls(await _replica_stats(client))
        if all(after[r] > before.get(r, 0) for r in after):
            break
    assert len(after) == 2 and all(after[r] > before.get(r, 0) for r in after), (before, after)
