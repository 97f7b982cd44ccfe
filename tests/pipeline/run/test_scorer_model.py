"""The model of path depth behind the dry run's scorer estimate (`pipeline.run.scorer_model`):
it follows B and the search's width, and it matches the points it was calibrated on."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pipeline.config import RunConfig, parse_run_config
from pipeline.problems.sources import load_problems
from pipeline.run.scorer_model import (
    BG_MCTS_DEPTH,
    MCTS_DEPTH,
    ScorerShape,
    SearchShape,
    model_estimate,
    scorer_tokens,
)
from search.scorer_kinds import GENPRM, ONE_PASS
from search.simulated import SimParams
from tests.actors.test_scorer_kinds import StepConfig

# The retired `scorer_estimate` benchmark at c7945b3 (docs/sizing.md, "The scorer's tokens
# against B"): scorer tokens per policy output token that the searches really spent.
GRID = {  # BG-MCTS on the simulated grid, 200 problems x 3 seeds
    (ONE_PASS, 3_000): 4.64,
    (ONE_PASS, 10_000): 7.76,
    (ONE_PASS, 20_000): 10.72,
    (ONE_PASS, 30_000): 12.60,
    (GENPRM, 3_000): 13.67,
    (GENPRM, 10_000): 18.95,
    (GENPRM, 20_000): 20.99,
    (GENPRM, 30_000): 21.67,
}
REAL = {  # the embedded default (SmolLM2 on llama.cpp, one-step arithmetic; 16 and 6 trees)
    (GENPRM, 300): 21.76,
    (ONE_PASS, 300): 3.32,
    (GENPRM, 1_000): 34.03,
    (ONE_PASS, 1_000): 3.86,
}


def _config(scorer: str = GENPRM, budget: int = 300, count: int = 16, **search: Any) -> RunConfig:
    data: dict[str, Any] = {
        "budget": budget,
        "source": {"kind": "arithmetic", "count": count, "seed": 0, "max_steps": 1},
        # the embedded default's search: BG-MCTS, 48-token steps
        "search": {"algorithm": "bg_mcts", "step_max_tokens": 48, **search},
        "scorer": {"genprm": {"max_analysis_tokens": 16}},
    }
    config = parse_run_config(data)
    if scorer == ONE_PASS:
        one_pass = config.scorer.model_copy(update={"kind": ONE_PASS, "engine": StepConfig()})
        config = config.model_copy(update={"scorer": one_pass})
    return config


def _ratio(config: RunConfig) -> float:
    """The dry run's ratio: the config and its problems' mean length."""
    problems = load_problems(config.source).problems
    estimate = model_estimate(config, sum(len(p["problem"]) for p in problems) / len(problems))
    assert estimate is not None
    return estimate.tokens.per_policy_token


def _grid(kind: str, budget: int) -> float:
    """The model with the simulated environment's shape, as the benchmark gives it."""
    params = SimParams()
    step = params.step_tokens_median * math.exp(params.step_tokens_sigma**2 / 2) + 1
    search = SearchShape(budget=budget, step_tokens=step, inserted_tokens=0.0, k=2, in_flight=1)
    if kind == ONE_PASS:
        scorer = ScorerShape(ONE_PASS, prompt_tokens=120.0, input_cap=4096.0)
    else:
        scorer = ScorerShape(GENPRM, prompt_tokens=400.0, analysis_tokens=320.0, input_cap=4096.0)
    return scorer_tokens(search, scorer).per_policy_token


@pytest.mark.parametrize("kind", [GENPRM, ONE_PASS])
def test_scorer_tokens_per_policy_token_grow_with_b(kind: str) -> None:
    ratios = [_ratio(_config(kind, budget)) for budget in (300, 1_000, 3_000, 10_000)]
    assert ratios == sorted(ratios) and ratios[-1] > 1.5 * ratios[0], ratios
    grid = [_grid(kind, budget) for budget in (3_000, 10_000, 20_000, 30_000)]
    assert grid == sorted(grid), grid


@pytest.mark.parametrize(("kind", "budget"), sorted(GRID))
def test_the_model_matches_the_simulated_grid(kind: str, budget: int) -> None:
    predicted, measured = _grid(kind, budget), GRID[(kind, budget)]
    assert abs(predicted / measured - 1) < 0.25, (predicted, measured)


@pytest.mark.parametrize(("kind", "budget"), sorted(REAL))
def test_the_model_matches_the_embedded_defaults_runs(kind: str, budget: int) -> None:
    config = _config(kind, budget, count=16 if budget == 300 else 6)  # the runs' problems
    predicted, measured = _ratio(config), REAL[(kind, budget)]
    assert abs(predicted / measured - 1) < 0.25, (predicted, measured)


def test_a_wider_search_makes_shallower_trees() -> None:
    def depth(**search: Any) -> float:
        estimate = model_estimate(_config(budget=20_000, step_max_tokens=1_024, **search), 200.0)
        assert estimate is not None
        return estimate.tokens.mean_depth

    # k children per expansion; expansions in flight spread over more lines, but only as
    # many fly as B holds at k x step_max_tokens each (20k / 2,048: 9)
    assert depth(k=2) > depth(k=3) > depth(k=5)
    assert depth(max_inflight_expansions=1) > depth(max_inflight_expansions=8)
    assert depth(max_inflight_expansions=16) == depth(max_inflight_expansions=9)


def test_answers_in_the_first_step_leave_the_tree_balanced() -> None:
    """Eq. 4's completion bias acts on unanswered nodes only: without it the tree is
    balanced and its depth grows like a logarithm of its nodes."""
    nodes = 250.0
    first_step = BG_MCTS_DEPTH.mean_depth(nodes, 2, 1, answer_steps=1)
    assert first_step == pytest.approx(BG_MCTS_DEPTH.balanced_depth(nodes, 2))
    assert 5 < first_step < 7  # the grid: 6.0 at 250 nodes
    assert BG_MCTS_DEPTH.mean_depth(nodes, 2, 1, answer_steps=3) == pytest.approx(
        BG_MCTS_DEPTH.dive_depth(nodes, 2, 1)
    )
    # MCTS has no completion bias at all: its own law, shallower than BG-MCTS's dive
    assert MCTS_DEPTH.mean_depth(nodes, 2, 1, answer_steps=1) < BG_MCTS_DEPTH.dive_depth(
        nodes, 2, 1
    )


def test_a_capped_input_reads_at_most_the_cap() -> None:
    search = SearchShape(budget=60_000, step_tokens=180.0, inserted_tokens=0.0, k=2, in_flight=1)
    free = scorer_tokens(search, ScorerShape(ONE_PASS, prompt_tokens=120.0))
    capped = scorer_tokens(search, ScorerShape(ONE_PASS, prompt_tokens=120.0, input_cap=4096.0))
    assert capped.per_policy_token < free.per_policy_token
    assert capped.sent * search.policy_tokens / capped.nodes <= 4096.0


@pytest.mark.parametrize(
    ("algorithm", "modelled"),
    [("bg_mcts", True), ("mcts", True), ("repeated_sampling", False), ("beam", False)],
)
def test_only_the_puct_searches_are_modelled(algorithm: str, modelled: bool) -> None:
    source = {"kind": "arithmetic", "count": 3}
    config = parse_run_config({"source": source, "search": {"algorithm": algorithm}})
    assert (model_estimate(config, 87.0) is not None) is modelled
