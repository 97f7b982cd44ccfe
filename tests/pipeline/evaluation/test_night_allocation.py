"""The simulated night (`pipeline.evaluation.night_allocation`): both arms on real BG-MCTS
trees of the simulated world, graded by its ground truth, rows by the records builders."""

from __future__ import annotations

import asyncio

from pipeline.evaluation.night_allocation import comparison, simulate_night
from pipeline.run.allocation import AllocationConfig
from search.simulated import SimParams, simulated_problems

PARAMS = SimParams(difficulty_alpha=1.0, difficulty_beta=2.5)
B = 4_000


def test_both_arms_spend_at_most_the_night_and_count_every_tree() -> None:
    problems = simulated_problems(24, seed=0, params=PARAMS)
    uniform = asyncio.run(simulate_night(problems, PARAMS, B, 0))
    config = AllocationConfig(enabled=True, window=8)
    allocated = asyncio.run(simulate_night(problems, PARAMS, B, 0, config))
    assert uniform.trees == 24 and allocated.trees >= 24  # a probe each, then second trees
    for night in (uniform, allocated):
        assert night.over_budget == 0 and night.policy_tokens <= 24 * B
        assert night.rows["sft"] > 0 and night.scorer_tokens > 0
    assert sum(allocated.probes.values()) == 24
    # the same night again: the same trees, the same budgets, the same rows
    again = asyncio.run(simulate_night(problems, PARAMS, B, 0, config))
    assert (again.rows, again.second_tokens) == (allocated.rows, allocated.second_tokens)
    lines, figures = comparison([uniform, uniform], [allocated, again])
    assert figures["tokens_over_budget"] == 0 and figures["pairs_per_mtok_ratio"] > 0
    assert any(line.startswith("| pairs |") for line in lines)
