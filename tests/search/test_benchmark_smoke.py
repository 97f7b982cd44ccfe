"""The naive subtree-walk BG-MCTS (`naive_bg_mcts`, the select/backprop benchmark's
other side) decides like `PuctSearch`.

A correctness check of the incremental aggregates (m, W, D -> W~ of Eq. 4)
against recomputation by subtree walks; no timing is asserted.
"""

from __future__ import annotations

import pickle

import pytest

from benchmarks import select_backprop as bench
from tests.search.naive_bg_mcts import NaiveTree


# rho annealed to 0.5 / 0.0: completion bias and exploration annealing decide;
# rho kept at 1.0: the generative child widens often (Eqs. 5-6).  Each case
# fails if the naive side drops the corresponding term.
@pytest.mark.parametrize(("seed", "rho_final"), [(0, 0.5), (2, 0.0), (5, 1.0)])
def test_naive_and_fast_select_the_same_expansions(seed: int, rho_final: float) -> None:
    trace = bench.lockstep_trace(200, seed, rho_final)
    assert len(trace) > 50
    mismatches = [(step, fast, naive) for step, (fast, naive) in enumerate(trace) if fast != naive]
    assert mismatches == []


def test_cross_check_exercises_answers_and_widening() -> None:
    tree = bench.build_tree(200, 0)
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
    choices = [fast for fast, _ in bench.lockstep_trace(200, 5, 1.0)]
    assert any(from_generative for _, _, from_generative in choices)
    assert any(not from_generative for _, _, from_generative in choices)


def test_timed_runs_agree_step_by_step() -> None:
    """The timing loops themselves make identical decisions (small, fast sizes)."""
    snapshot = pickle.dumps(bench.build_tree(150, 3))
    settings = bench.make_fast().s
    fast = bench.time_fast(snapshot, 150, 40, 3)
    naive = bench.time_naive(snapshot, 150, 40, 3, settings)
    assert bench.compare_runs(fast, naive) == 40
