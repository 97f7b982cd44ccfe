"""Property tests over random scripted policies, for every algorithm.

The scripted policy and scorer are fakes (no model runs in unit tests); hypothesis
draws their behaviour: step lengths, answer rate, failures, context overflows,
score distribution, budget and node unit.  After every step we check:

* C_used <= B, and rho never increases;
* m, W, D of every node equal a brute-force recomputation from the node list;
* the search terminates (within a generous wall-clock bound);
* under the default rule the chosen answer is the highest-Q answered node.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search import ALGORITHMS, parse_search_config, run_search
from search.algorithms import make_algorithm
from search.algorithms.base import Expansion, SearchAlgorithm
from search.budget import Budget
from search.scripted import ScriptedPolicy, ScriptedScorer
from search.tree import Node, Tree

# AB-MCTS-M fits a Bayesian model by MCMC at every step (seconds each): a few short
# searches only (long steps, small budgets), so each example is a handful of steps.
EXAMPLES = {"ab_mcts_m": 3, "ab_mcts_a": 15}
SHORT = {"ab_mcts_m"}


def brute_force_aggregates(tree: Tree) -> dict[int, tuple[int, float, float]]:
    """m, W, D from scratch: children always have larger ids than their parents."""
    m = {n.id: 1 for n in tree}
    w = {n.id: n.q if n.parent_id is not None else 0.0 for n in tree}
    d = {n.id: float(n.d) if not n.answered else 0.0 for n in tree}
    for node in reversed(tree.nodes):
        if node.parent_id is not None:
            m[node.parent_id] += m[node.id]
            w[node.parent_id] += w[node.id]
            d[node.parent_id] += d[node.id]
    return {i: (m[i], w[i], d[i]) for i in m}


class Checked(SearchAlgorithm):
    """Wraps an algorithm and checks the invariants before each of its decisions."""

    def __init__(self, inner: SearchAlgorithm) -> None:
        self.inner = inner
        self.name = inner.name
        self.last_rho = 1.0
        self.checks = 0

    def check(self, tree: Tree, budget: Budget) -> None:
        assert budget.used <= budget.total
        assert budget.rho <= self.last_rho
        self.last_rho = budget.rho
        for node_id, (m, w, d) in brute_force_aggregates(tree).items():
            node = tree[node_id]
            assert node.m == m, f"m of node {node_id}"
            assert math.isclose(node.w, w, abs_tol=1e-9), f"W of node {node_id}"
            assert math.isclose(node.d_sum, d, abs_tol=1e-9), f"D of node {node_id}"
        self.checks += 1

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        self.check(tree, budget)
        return self.inner.propose(tree, budget)

    def observe(self, tree: Tree, expansion: Expansion, children: list[Node]) -> None:
        self.inner.observe(tree, expansion, children)

    def should_stop(self, tree: Tree, budget: Budget) -> bool:
        return self.inner.should_stop(tree, budget)


def scenarios(short: bool) -> st.SearchStrategy[dict[str, object]]:
    return st.fixed_dictionaries(
        {
            "seed": st.integers(0, 10**6),
            "budget": st.integers(50, 200) if short else st.integers(50, 2500),
            "lo": st.integers(60, 100) if short else st.integers(1, 30),
            "spread": st.integers(0, 20) if short else st.integers(0, 90),
            "p_answer": st.floats(0.0, 1.0),
            "p_error": st.sampled_from([0.0, 0.05] if short else [0.0, 0.0, 0.05, 0.3]),
            "p_overflow": st.sampled_from([0.0, 0.0, 0.1]),
            "distribution": st.sampled_from(["uniform", "near_binary"]),
            "unit": st.sampled_from(["sequential", "full"]),
        }
    )


def _config(algorithm: str, unit: str) -> object:
    data: dict[str, object] = {"algorithm": algorithm, "full_max_tokens": 400}
    if algorithm in SHORT:
        data["full_max_tokens"] = 150
    if algorithm in {"bg_mcts", "mcts", "litesearch", "ab_mcts_m", "ab_mcts_a", "beam"}:
        data["node_unit"] = unit
    return parse_search_config(data)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_invariants_hold_for_every_algorithm(algorithm: str) -> None:
    @settings(
        max_examples=EXAMPLES.get(algorithm, 30),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(scenario=scenarios(algorithm in SHORT))
    def check(scenario: dict[str, object]) -> None:
        config = _config(algorithm, str(scenario["unit"]))
        seed = int(scenario["seed"])  # type: ignore[call-overload]
        lo = int(scenario["lo"])  # type: ignore[call-overload]
        policy = ScriptedPolicy(
            seed=seed,
            step_tokens=(lo, lo + int(scenario["spread"])),  # type: ignore[call-overload]
            p_answer=float(scenario["p_answer"]),  # type: ignore[arg-type]
            p_error=float(scenario["p_error"]),  # type: ignore[arg-type]
            p_overflow=float(scenario["p_overflow"]),  # type: ignore[arg-type]
        )
        scorer = ScriptedScorer(seed=seed, distribution=str(scenario["distribution"]))
        checked = Checked(make_algorithm(config, seed=seed))  # type: ignore[arg-type]
        budget = int(scenario["budget"])  # type: ignore[call-overload]
        result = asyncio.run(
            asyncio.wait_for(
                run_search("p", config, policy, scorer, budget, seed, algorithm=checked),  # type: ignore[arg-type]
                timeout=900 if algorithm in SHORT else 120,
            )
        )
        checked.check(result.tree, Budget(total=budget, used=result.c_used))
        assert checked.checks >= result.iterations
        assert result.c_used <= budget
        assert all(p.c_used <= budget for p in result.trace)
        assert all(n.c_used <= budget for n in result.tree)
        candidates = [n for n in result.answered_nodes if n.answer is not None]
        if candidates:
            best = max(candidates, key=lambda n: n.q)  # max keeps the first on ties
            assert result.chosen_node_id == best.id
        else:
            assert result.chosen_answer is None

    check()
