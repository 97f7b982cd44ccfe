"""The naive subtree-walk BG-MCTS (`naive_bg_mcts`) decides like `PuctSearch`.

A correctness check of the incremental aggregates (m, W, D -> W~ of Eq. 4)
against recomputation by subtree walks: trees are grown by BG-MCTS itself with
seeded random Q, 10% of the new nodes answered, rho annealed from 1.0 down.
"""

from __future__ import annotations

import random

import pytest

from search.algorithms import make_algorithm
from search.algorithms.puct import PuctSearch
from search.budget import Budget
from search.config import BGMCTSConfig
from search.protocols import FinishReason
from search.tree import Tree
from tests.search.naive_bg_mcts import Choice, NaiveTree, naive_select


def _grow(
    size: int, seed: int, rho_final: float, naive: NaiveTree | None = None
) -> tuple[Tree, list[tuple[Choice, Choice]]]:
    """A `size`-node tree grown by BG-MCTS, and (fast, naive) decisions of every step.

    With `naive`, that tree receives the fast side's expansions with the same random
    children, so both stay identical and every pair should match.
    """
    rng = random.Random(seed)
    tree = Tree("benchmark problem")
    algorithm = make_algorithm(BGMCTSConfig())
    assert isinstance(algorithm, PuctSearch)
    budget = Budget(total=1_000_000.0)
    trace: list[tuple[Choice, Choice]] = []
    while len(tree) < size:
        rho = 1.0 - (1.0 - rho_final) * len(tree) / size
        budget.used = (1.0 - rho) * budget.total
        (expansion,) = algorithm.propose(tree, budget)
        fast = (expansion.node_id, expansion.n, expansion.from_generative)
        if naive is not None:
            trace.append((fast, naive_select(naive, algorithm.s, budget.rho)))
        for _ in range(min(expansion.n, size - len(tree))):
            q, answered = rng.random(), rng.random() < 0.1
            tree.add_child(
                tree[expansion.node_id],
                text="",
                q=q,
                answered=answered,
                answer="1" if answered else None,
                finish=FinishReason.EOS if answered else FinishReason.STOP_STRING,
                output_tokens=1,
            )
            if naive is not None:
                naive.add_child(expansion.node_id, q, answered)
    return tree, trace


def lockstep_trace(size: int, seed: int, rho_final: float) -> list[tuple[Choice, Choice]]:
    return _grow(size, seed, rho_final, NaiveTree())[1]


# rho annealed to 0.5 / 0.0: completion bias and exploration annealing decide;
# rho kept at 1.0: the generative child widens often (Eqs. 5-6).  Each case
# fails if the naive side drops the corresponding term.
@pytest.mark.parametrize(("seed", "rho_final"), [(0, 0.5), (2, 0.0), (5, 1.0)])
def test_naive_and_fast_select_the_same_expansions(seed: int, rho_final: float) -> None:
    trace = lockstep_trace(200, seed, rho_final)
    assert len(trace) > 50
    mismatches = [(step, fast, naive) for step, (fast, naive) in enumerate(trace) if fast != naive]
    assert mismatches == []


def test_cross_check_exercises_answers_and_widening() -> None:
    tree, _ = _grow(200, 0, 0.5)
    assert len(tree) == 200
    assert tree.answered_ids, "answered nodes make D and d_ans matter"
    naive = NaiveTree.from_tree(tree)
    assert naive.d_ans == tree.d_ans
    # The walked statistics equal the aggregates node by node.
    kappa, rho = 1.0, 0.5
    bias = kappa * (1.0 - rho) / tree.d_ans
    for node in tree:
        m, w_tilde = naive.subtree_stats(node.id, bias)
        assert m == node.m
        assert w_tilde == pytest.approx(tree.w_tilde(node, rho, kappa), rel=1e-12, abs=1e-12)
    choices = [fast for fast, _ in lockstep_trace(200, 5, 1.0)]
    assert any(from_generative for _, _, from_generative in choices)
    assert any(not from_generative for _, _, from_generative in choices)
