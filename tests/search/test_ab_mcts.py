"""AB-MCTS-M and AB-MCTS-A (treequest) driven by our search driver.

The policy and scorer are the deterministic scripted fakes of `search.scripted`:
no model runs in unit tests, so a "generation" is scripted words and a "PRM
score" a seeded draw.  treequest's AB-MCTS-M fits a Bayesian model with NUTS at
every step (seconds each on CPU), so its searches here are a handful of steps
on small budgets with long scripted steps; AB-MCTS-A takes about a millisecond
a step and runs larger trees.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

from search import parse_search_config, run_search
from search.algorithms import make_algorithm
from search.algorithms.ab_mcts import ABMCTS
from search.budget import Budget
from search.config import ABMCTSConfig
from search.driver import SearchResult
from search.scripted import ScriptedPolicy, ScriptedScorer
from search.tree import Tree

HAS_M = all(importlib.util.find_spec(m) is not None for m in ("jax", "numpyro", "pymc"))
needs_m = pytest.mark.skipif(not HAS_M, reason="AB-MCTS-M needs treequest[abmcts-m]")


def _config(algorithm: str, unit: str, **extra: Any) -> ABMCTSConfig:
    config = parse_search_config({"algorithm": algorithm, "node_unit": unit, **extra})
    assert isinstance(config, ABMCTSConfig)
    return config


async def _search(
    config: ABMCTSConfig, budget: float, policy: ScriptedPolicy, seed: int = 0, **kwargs: Any
) -> tuple[SearchResult, ABMCTS]:
    algorithm = ABMCTS(config, seed=seed, **kwargs)
    scorer = ScriptedScorer(seed=seed)
    result = await run_search("p", config, policy, scorer, budget, seed, algorithm=algorithm)
    return result, algorithm


def _check_mirror(result: SearchResult, algorithm: ABMCTS) -> None:
    """treequest's tree is ours node for node, plus the virtual failures it was told."""
    tree = result.tree
    assert algorithm.treequest_size == len(tree) + algorithm.n_virtual
    ours = {n.id: n.parent_id for n in tree if n.parent_id is not None}
    assert algorithm.treequest_parents() == ours


def _check_search(result: SearchResult, algorithm: ABMCTS, budget: float, min_nodes: int) -> None:
    assert result.c_used <= budget
    assert result.stop_reason == "budget_exhausted"
    assert len(result.tree) >= min_nodes
    assert result.iterations == len(result.tree) - 1  # one child per step
    _check_mirror(result, algorithm)
    candidates = [n for n in result.tree.answered_nodes() if n.answer is not None]
    assert candidates, "the scripted policy should have answered at least once"
    best = max(n.q for n in candidates)
    assert result.chosen_node_id is not None
    chosen = result.tree[result.chosen_node_id]
    assert chosen.q == best and chosen.answer == result.chosen_answer


# ------------------------------------------------------------------ AB-MCTS-A
@pytest.mark.parametrize("unit", ["full", "sequential"])
@pytest.mark.parametrize("dist_type", ["gaussian", "beta"])
async def test_ab_mcts_a_search(unit: str, dist_type: str) -> None:
    config = _config("ab_mcts_a", unit, dist_type=dist_type)
    policy = ScriptedPolicy(seed=1, step_tokens=(5, 15), p_answer=0.4)
    result, algorithm = await _search(config, 1500, policy, seed=1)
    treequest_algo: Any = algorithm._algo
    assert treequest_algo.prior_config.dist_type == dist_type
    _check_search(result, algorithm, 1500, min_nodes=20)
    assert result.tree.max_depth >= 2  # it continues nodes, not only widens the root
    assert not any(n.from_generative for n in result.tree)


async def test_ab_mcts_a_is_reproducible_and_leaves_numpy_alone() -> None:
    config = _config("ab_mcts_a", "sequential")
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    shapes = []
    for seed in (5, 5, 6):
        policy = ScriptedPolicy(seed=0, step_tokens=(5, 15))
        result, _ = await _search(config, 800, policy, seed=seed)
        shapes.append([(n.parent_id, n.q) for n in result.tree])
    assert shapes[0] == shapes[1] != shapes[2]
    assert np.random.random() == expected  # the caller's global RandomState is untouched


async def test_ab_mcts_a_failing_policy_terminates() -> None:
    config = _config("ab_mcts_a", "full")
    result, algorithm = await _search(config, 1000, ScriptedPolicy(p_error=1.0))
    assert result.stop_reason == "stalled" and result.c_used == 0
    assert result.chosen_answer is None
    assert len(result.tree) - 1 == config.max_stalled_expansions
    assert not any(n.expandable for n in result.tree if n.parent_id is not None)
    assert algorithm.n_virtual > 0  # it picked failed nodes and was told they fail again
    _check_mirror(result, algorithm)


async def test_failed_nodes_are_never_expanded_even_without_reasking() -> None:
    """max_reasks=0: a failed pick is told one virtual failure, then goes to its parent."""
    config = _config("ab_mcts_a", "sequential", max_stalled_expansions=64)
    policy = ScriptedPolicy(seed=2, step_tokens=(5, 15), p_error=0.4)
    result, algorithm = await _search(config, 1500, policy, seed=2, max_reasks=0)
    tree = result.tree
    assert any(not n.expandable for n in tree)
    assert all(tree[n.parent_id].expandable for n in tree if n.parent_id is not None)
    assert algorithm.n_fallbacks == algorithm.n_virtual > 0
    _check_mirror(result, algorithm)


async def test_dropped_request_is_proposed_again() -> None:
    config = _config("ab_mcts_a", "full")
    algorithm = make_algorithm(config, seed=0)
    assert isinstance(algorithm, ABMCTS) and algorithm.name == "ab_mcts_a"
    tree, budget = Tree("p"), Budget(total=100)
    first = algorithm.propose(tree, budget)
    algorithm.observe(tree, first[0], [])  # the driver generated nothing
    assert algorithm.propose(tree, budget) == first
    assert algorithm.treequest_size == 1


# ------------------------------------------------------------------ AB-MCTS-M
@needs_m
@pytest.mark.integration
@pytest.mark.parametrize(("unit", "budget"), [("full", 250), ("sequential", 150)])
async def test_ab_mcts_m_search(unit: str, budget: int) -> None:
    config = _config("ab_mcts_m", unit)
    policy = ScriptedPolicy(seed=1, step_tokens=(40, 60), p_answer=0.6)
    result, algorithm = await _search(config, budget, policy, seed=1)
    treequest_algo: Any = algorithm._algo
    assert treequest_algo.enable_pruning is config.enable_pruning
    _check_search(result, algorithm, budget, min_nodes=4)


@needs_m
@pytest.mark.integration
async def test_ab_mcts_m_failing_policy_terminates() -> None:
    config = _config("ab_mcts_m", "full", max_stalled_expansions=2, enable_pruning=False)
    result, algorithm = await _search(config, 600, ScriptedPolicy(p_error=1.0), seed=1)
    treequest_algo: Any = algorithm._algo
    assert treequest_algo.enable_pruning is False
    assert result.stop_reason == "stalled" and result.c_used == 0
    assert result.chosen_answer is None and len(result.tree) == 3
    assert algorithm.n_virtual > 0  # with seed 1 it picks a failed node once
    _check_mirror(result, algorithm)
