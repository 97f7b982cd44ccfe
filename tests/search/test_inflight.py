"""Several expansions of one tree in flight (`max_inflight_expansions`).

The policy and scorer are the scripted fakes (no model runs in unit tests), wrapped so
that hypothesis decides when each call returns (a random number of event-loop turns
or a short sleep: random arrival orders), which calls fail, and when the whole search
is cancelled.  Checked at every service call and at the end:

* C_used + reserved <= B at every instant (and C_used <= B at the end);
* nothing stays reserved and no virtual visit stays on the tree (m, W, D equal a
  brute-force recomputation) after the search ends, fails or is cancelled;
* one in flight is the default (its path is the paper's loop, checked against the plain
  implementations in tests/search/test_conventions.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search import parse_search_config, run_search
from search.budget import Budget, BudgetViolation
from search.driver import _Search
from search.protocols import Generation, GenerationRequest, Score, ScoreRequest
from search.scripted import ScriptedPolicy, ScriptedScorer
from tests.search.test_properties import brute_force_aggregates


class Arrivals:
    """Random delays and failures for every call; checks the budget at each one."""

    def __init__(self, seed: int, p_fail: float, budget_of: Any) -> None:
        self.rng = random.Random(seed)
        self.p_fail = p_fail
        self.budget_of = budget_of
        self.calls = 0
        # Recorded, not asserted here: the driver turns any exception a service call
        # raises into an error node, so an assert inside a call could never fail the test.
        self.violations: list[str] = []

    def check(self) -> None:
        budget: Budget | None = self.budget_of()
        if budget is None:
            return
        if budget.used + budget.reserved > budget.total + 1e-6 or budget.reserved < -1e-9:
            self.violations.append(f"C_used {budget.used} reserved {budget.reserved}")

    async def arrive(self) -> None:
        self.calls += 1
        self.check()
        if self.rng.random() < 0.3:
            await asyncio.sleep(self.rng.random() * 0.002)
        else:
            for _ in range(self.rng.randrange(4)):
                await asyncio.sleep(0)
        self.check()
        if self.rng.random() < self.p_fail:
            raise RuntimeError("injected failure")


class SlowPolicy:
    def __init__(self, inner: ScriptedPolicy, arrivals: Arrivals) -> None:
        self.inner, self.arrivals, self.name = inner, arrivals, "slow"

    async def count_tokens(self, text: str) -> int:
        return await self.inner.count_tokens(text)

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        await self.arrivals.arrive()
        return await self.inner.generate(request)


class SlowScorer:
    def __init__(self, inner: ScriptedScorer, arrivals: Arrivals) -> None:
        self.inner, self.arrivals, self.name = inner, arrivals, "slow-prm"

    async def score(self, request: ScoreRequest) -> Score:
        await self.arrivals.arrive()
        return await self.inner.score(request)


def _config(algorithm: str, inflight: int, charge_all: bool) -> Any:
    data: dict[str, Any] = {
        "algorithm": algorithm,
        "max_inflight_expansions": inflight,
        "step_max_tokens": 60,
    }
    if charge_all:  # every token kind charged: input tokens and the score reserve too
        data["cost"] = {
            "policy_input": 0.1,
            "prm_input": 0.01,
            "prm_output": 0.5,
            "prm_reserve_input_tokens": 2000,
            "prm_reserve_output_tokens": 8,
        }
    return parse_search_config(data)


def _no_residue(search: _Search) -> None:
    budget = search.budget
    assert budget.reserved == 0.0
    assert budget.open_reservations == 0
    assert budget.used <= budget.total + 1e-9
    for node_id, (m, w, d) in brute_force_aggregates(search.tree).items():
        node = search.tree[node_id]
        assert node.m == m, f"virtual visits left on node {node_id}"
        assert abs(node.w - w) < 1e-9 and abs(node.d_sum - d) < 1e-9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    algorithm=st.sampled_from(["bg_mcts", "mcts"]),
    inflight=st.sampled_from([2, 3, 4, 8]),
    budget=st.integers(30, 1500),
    p_fail=st.sampled_from([0.0, 0.1, 0.4]),
    charge_all=st.booleans(),
    cancel_after=st.one_of(st.none(), st.integers(1, 40)),
)
def test_random_arrivals_never_overspend_nor_leave_a_reservation(
    seed: int,
    algorithm: str,
    inflight: int,
    budget: int,
    p_fail: float,
    charge_all: bool,
    cancel_after: int | None,
) -> None:
    config = _config(algorithm, inflight, charge_all)
    holder: dict[str, _Search] = {}
    arrivals = Arrivals(seed, p_fail, lambda: holder["s"].budget if "s" in holder else None)
    policy = SlowPolicy(ScriptedPolicy(seed=seed, step_tokens=(5, 40), p_answer=0.3), arrivals)
    scorer = SlowScorer(ScriptedScorer(seed=seed), arrivals)
    search = _Search("p", config, policy, scorer, budget, seed, None)  # type: ignore[arg-type]
    holder["s"] = search

    async def main() -> None:
        task = asyncio.ensure_future(search.run())
        if cancel_after is None:
            result = await asyncio.wait_for(task, 60)
            assert result.c_used <= budget
            assert all(p.c_used <= budget for p in result.trace)
            return
        while not task.done() and arrivals.calls < cancel_after:
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert not arrivals.violations, arrivals.violations[:3]
    _no_residue(search)


def test_pending_expansions_overlap_and_select_different_leaves() -> None:
    """With 4 in flight, 4 requests are pending at once and the virtual loss spreads them."""
    config = _config("mcts", 4, charge_all=False)
    gate = asyncio.Event()
    seen: list[str] = []

    class Held(ScriptedPolicy):
        async def generate(self, request: GenerationRequest) -> list[Generation]:
            seen.append(request.assistant_prefix)
            if len(seen) == 4:  # all four pending at once before any returns
                gate.set()
            await gate.wait()
            return await super().generate(request)

    async def main() -> Any:
        return await run_search("p", config, Held(seed=1), ScriptedScorer(seed=1), 2000, 1)

    result = asyncio.run(asyncio.wait_for(main(), 60))
    assert result.c_used <= 2000
    # At first only the root exists: the four pending walks all expand it (a widening).
    assert seen[:4] == [seen[0]] * 4
    # Later, with 4 pending at a time, the virtual loss spreads them over the tree.
    later = seen[4:]
    windows = [set(later[i : i + 4]) for i in range(0, len(later) - 3, 4)]
    assert any(len(w) > 1 for w in windows), "pending walks all went to one leaf"


def test_a_lying_service_still_ends_with_nothing_reserved() -> None:
    """A policy that reports more tokens than max_tokens raises; reservations are closed."""
    config = _config("bg_mcts", 4, charge_all=False)

    class Liar(ScriptedPolicy):
        async def generate(self, request: GenerationRequest) -> list[Generation]:
            await asyncio.sleep(0)
            out = await super().generate(request)
            return [Generation(g.text, request.max_tokens + 1, g.finish) for g in out]

    search = _Search("p", config, Liar(seed=2), ScriptedScorer(seed=2), 500, 2, None)
    with pytest.raises(BudgetViolation):
        asyncio.run(search.run())
    _no_residue(search)


@pytest.mark.parametrize("algorithm", ["bg_mcts", "mcts"])
def test_one_in_flight_is_the_default(algorithm: str) -> None:
    default = parse_search_config({"algorithm": algorithm})
    assert default.max_inflight_expansions == 1  # type: ignore[union-attr]


def test_reference_conventions_refuse_several_in_flight() -> None:
    with pytest.raises(ValueError, match="max_inflight_expansions"):
        parse_search_config(
            {"algorithm": "bg_mcts", "conventions": "reference", "max_inflight_expansions": 2}
        )
